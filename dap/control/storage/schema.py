"""The control plane's Postgres schema and its migrations.

Everything lives in the Postgres schema ``dap_control`` so that a control plane can share a
database with other parts without name clashes. Migrations are an ordered list of SQL scripts;
``migrate`` applies the missing ones at start-up in one transaction under an advisory lock, so two
replicas starting together do not race.

Tables (region, standalone and cluster use the same schema; cluster mode leaves the routing
tables empty and uses ``outbox``, ``region_snapshot`` and ``trusted_keys``):

- ``artifacts``: one row per artifact version; ``envelope`` holds the exact signed JSON bytes.
- ``artifact_files``: path, sha256 and size of each file (the content is in the envelope).
- ``snapshot_state``: the single snapshot version counter.
- ``deployments``: desired binding workspace -> app, artifact, cluster, plus the placement the
  workspace asked for and the routing error when no cluster fits; ``workspace_spec`` is set on
  the bindings of Workspace resources the region control routes (``dap.control.kube``).
- ``clusters``, ``node_health``, ``workspace_status``: the routing registry and operator reports.
- ``evidence``: accepted evidence records, keyed by their idempotency id.
- ``outbox``: evidence a cluster still has to relay to its region (survives restarts).
- ``region_snapshot``: the last region-signed snapshot a cluster serves to its pods.
- ``trusted_keys``: public keys a cluster trusts for region signatures.
- ``log_leaves``, ``log_nodes``, ``log_heads``: the transparency log (``supply.transparency``): each
  entry's exact leaf bytes, every complete perfect subtree hash, every signed tree head.
- ``freezes``, ``freeze_holds``: change freezes and the artifact each covered workspace keeps
  while one holds (``supply.freezes``, ``supply.freezing``).
- ``policies``: per app, the approval keys and threshold a registration needs (``supply.policies``).
- ``promotions``: per app, the staging and production workspaces and the soak time between them
  (``promotions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import asyncpg

if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    # The connection types every store function accepts: a plain connection or a pool's proxy.
    Conn: TypeAlias = asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]

SCHEMA = "dap_control"
LOCK_KEY = 0x64617063  # "dapc": the advisory lock taken while migrating
NOTIFY_CHANNEL = "dap_control_changed"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE dap_control.artifacts (
        artifact_id     text PRIMARY KEY,
        app             text NOT NULL,
        version         integer NOT NULL CHECK (version > 0),
        sha256          text NOT NULL,
        signing_key_id  text NOT NULL,
        status          text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
        size_bytes      bigint NOT NULL,
        created_at      timestamptz NOT NULL DEFAULT now(),
        revoked_at      timestamptz,
        envelope        bytea NOT NULL,
        UNIQUE (app, version)
    );
    CREATE TABLE dap_control.artifact_files (
        artifact_id  text NOT NULL REFERENCES dap_control.artifacts ON DELETE CASCADE,
        path         text NOT NULL,
        sha256       text NOT NULL,
        size_bytes   bigint NOT NULL,
        PRIMARY KEY (artifact_id, path)
    );
    CREATE TABLE dap_control.snapshot_state (
        singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version     bigint NOT NULL,
        changed_at  timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO dap_control.snapshot_state (version) VALUES (0);
    CREATE TABLE dap_control.deployments (
        workspace_id       text PRIMARY KEY,
        app                text NOT NULL,
        artifact_id        text REFERENCES dap_control.artifacts,
        cluster_id         text,
        cluster_class      text,
        region             text,
        requested_cluster  text,
        error              text,
        updated_at         timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX deployments_app ON dap_control.deployments (app);
    CREATE TABLE dap_control.clusters (
        cluster_id      text PRIMARY KEY,
        labels          jsonb NOT NULL DEFAULT '{}',
        status          text NOT NULL DEFAULT 'active',
        max_workspaces  integer NOT NULL DEFAULT 100 CHECK (max_workspaces >= 0),
        load            double precision NOT NULL DEFAULT 0,
        last_seen       timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE dap_control.node_health (
        cluster_id  text NOT NULL,
        node        text NOT NULL,
        status      text NOT NULL,
        workspaces  integer NOT NULL,
        cpu         double precision NOT NULL,
        memory      double precision NOT NULL,
        at          timestamptz NOT NULL,
        PRIMARY KEY (cluster_id, node)
    );
    CREATE TABLE dap_control.workspace_status (
        workspace_id  text NOT NULL,
        cluster_id    text NOT NULL,
        phase         text NOT NULL,
        conditions    jsonb NOT NULL,
        at            timestamptz NOT NULL,
        PRIMARY KEY (workspace_id, cluster_id)
    );
    CREATE TABLE dap_control.evidence (
        id            text PRIMARY KEY,
        type          text NOT NULL,
        workspace_id  text,
        cluster_id    text,
        at            timestamptz NOT NULL,
        received_at   timestamptz NOT NULL DEFAULT now(),
        record        jsonb NOT NULL
    );
    CREATE INDEX evidence_workspace_at ON dap_control.evidence (workspace_id, at);
    CREATE INDEX evidence_type_at ON dap_control.evidence (type, at);
    CREATE TABLE dap_control.outbox (
        seq        bigserial PRIMARY KEY,
        record_id  text NOT NULL UNIQUE,
        record     jsonb NOT NULL,
        queued_at  timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE dap_control.region_snapshot (
        singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        etag        text NOT NULL,
        body        bytea NOT NULL,
        fetched_at  timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE dap_control.trusted_keys (
        key_id      text PRIMARY KEY,
        public_key  bytea NOT NULL,
        added_at    timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 2: bindings of Workspace resources routed by the region control (dap.control.kube): the
    # workspace's spec travels with the binding to the cluster control that materialises it.
    """
    ALTER TABLE dap_control.deployments ADD COLUMN workspace_spec jsonb;
    CREATE INDEX deployments_cluster ON dap_control.deployments (cluster_id);
    ALTER TABLE dap_control.clusters ADD COLUMN last_pull timestamptz;
    """,
    # 3: the transparency log (dap.control.supply.transparency, dap.config.tlog). Leaves keep the exact
    # bytes that were hashed; nodes are perfect subtrees, written once when they complete.
    """
    CREATE TABLE dap_control.log_leaves (
        idx          bigint PRIMARY KEY CHECK (idx >= 0),
        kind         text NOT NULL,
        app          text,
        artifact_id  text,
        data         bytea NOT NULL,
        appended_at  timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX log_leaves_artifact ON dap_control.log_leaves (artifact_id, kind);
    CREATE INDEX log_leaves_app ON dap_control.log_leaves (app, idx);
    CREATE TABLE dap_control.log_nodes (
        level  smallint NOT NULL CHECK (level >= 0),
        idx    bigint NOT NULL CHECK (idx >= 0),
        hash   bytea NOT NULL,
        PRIMARY KEY (level, idx)
    );
    CREATE TABLE dap_control.log_heads (
        tree_size  bigint PRIMARY KEY CHECK (tree_size >= 0),
        root_hash  bytea NOT NULL,
        head       bytea NOT NULL,
        signed_at  timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 4: change freezes (dap.control.supply.freezes). ``ended`` marks a freeze whose end time passed and
    # whose snapshot change was made, so exactly one control process bumps the snapshot for it.
    """
    CREATE TABLE dap_control.freezes (
        freeze_id   text PRIMARY KEY,
        scope       text NOT NULL CHECK (scope IN ('app', 'workspace', 'environment')),
        target      text NOT NULL,
        reason      text NOT NULL CHECK (length(reason) > 0),
        created_at  timestamptz NOT NULL DEFAULT now(),
        ends_at     timestamptz NOT NULL,
        lifted_at   timestamptz,
        ended       boolean NOT NULL DEFAULT false
    );
    CREATE TABLE dap_control.freeze_holds (
        freeze_id     text NOT NULL REFERENCES dap_control.freezes ON DELETE CASCADE,
        workspace_id  text NOT NULL,
        artifact_id   text NOT NULL REFERENCES dap_control.artifacts,
        PRIMARY KEY (freeze_id, workspace_id)
    );
    """,
    # 5: signing policies (dap.control.supply.policies): k of n approval keys per app.
    """
    CREATE TABLE dap_control.policies (
        app         text PRIMARY KEY,
        keys        jsonb NOT NULL,
        threshold   integer NOT NULL CHECK (threshold >= 1),
        updated_at  timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 6: promotion rules (dap.control.supply.promotions) and the evidence index their check reads.
    """
    CREATE TABLE dap_control.promotions (
        app            text PRIMARY KEY,
        sources        text[] NOT NULL,
        targets        text[] NOT NULL,
        after_seconds  integer NOT NULL CHECK (after_seconds >= 0),
        updated_at     timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX evidence_artifact ON dap_control.evidence ((record->>'artifact_id'), workspace_id);
    """,
    # 7: a management Workspace's binding is its name, the workspace id registrations use, and no
    # longer ``namespace/name``: the two were separate bindings, so placed pods got no artifact.
    # A registration binding and a Workspace of the same name merge (the Workspace's placement
    # wins, as it would on its next watch event); of Workspaces sharing a name in several
    # namespaces the first namespace keeps the binding and the region control marks the others.
    """
    ALTER TABLE dap_control.deployments ADD COLUMN namespace text;
    -- A moved management Workspace stays placed on the cluster it leaves until its new cluster
    -- reports it Ready (bindings.route): a drain hands over, it does not cut over.
    ALTER TABLE dap_control.deployments ADD COLUMN handing_over_from text;
    -- A cluster declared by a Cluster resource keeps its labels, state and maximum when its
    -- cluster control announces itself (registry.upsert_cluster).
    ALTER TABLE dap_control.clusters ADD COLUMN declared boolean NOT NULL DEFAULT false;
    CREATE TEMP TABLE kube_moves ON COMMIT DROP AS
        SELECT DISTINCT ON (split_part(workspace_id, '/', 2))
               workspace_id AS old_id, split_part(workspace_id, '/', 1) AS namespace,
               split_part(workspace_id, '/', 2) AS new_id, cluster_id, cluster_class, region,
               requested_cluster, error, workspace_spec
        FROM dap_control.deployments
        WHERE workspace_spec IS NOT NULL AND position('/' IN workspace_id) > 0
        ORDER BY split_part(workspace_id, '/', 2), workspace_id;
    UPDATE dap_control.deployments d SET namespace = m.namespace, workspace_spec = m.workspace_spec,
           cluster_class = m.cluster_class, region = m.region, requested_cluster = m.requested_cluster
        FROM kube_moves m WHERE d.workspace_id = m.new_id;
    INSERT INTO dap_control.deployments (workspace_id, app, cluster_id, cluster_class, region,
           requested_cluster, error, workspace_spec, namespace)
        SELECT new_id, '', cluster_id, cluster_class, region, requested_cluster, error,
               workspace_spec, namespace
        FROM kube_moves ON CONFLICT (workspace_id) DO NOTHING;
    INSERT INTO dap_control.workspace_status (workspace_id, cluster_id, phase, conditions, at)
        SELECT split_part(workspace_id, '/', 2), cluster_id, phase, conditions, at
        FROM dap_control.workspace_status WHERE position('/' IN workspace_id) > 0
        ON CONFLICT DO NOTHING;
    DELETE FROM dap_control.workspace_status WHERE position('/' IN workspace_id) > 0;
    DELETE FROM dap_control.deployments WHERE position('/' IN workspace_id) > 0;
    """,
)


async def migrate(conn: Conn) -> int:
    """Apply the missing migrations; return the schema version now in place."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (version integer NOT NULL)")
        current = await conn.fetchval(f"SELECT max(version) FROM {SCHEMA}.schema_version") or 0
        for number, script in enumerate(MIGRATIONS, start=1):
            if number > current:
                await conn.execute(script)
                await conn.execute(f"INSERT INTO {SCHEMA}.schema_version (version) VALUES ($1)", number)
        return len(MIGRATIONS)
