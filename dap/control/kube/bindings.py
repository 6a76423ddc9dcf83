"""Postgres side of Kubernetes-native control: management Workspaces and Clusters as rows.

A management Workspace is a binding in ``dap_control.deployments`` (``workspace_id`` = its name,
the workspace id a registration names too; ``namespace`` and ``workspace_spec`` its own; ``app``
empty until a registration names it); a Cluster resource is a row of
``dap_control.clusters``. ``route`` places every such binding with ``registry.place`` (rule 5, the
pure ``routing.choose``) under one advisory lock, so two region controls never route at once.
Reports of the cluster controls land in ``dap_control.workspace_status`` through the existing
``POST /v1/workspace-status``; ``bindings`` joins them onto the binding's current cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dap.control import ids
from dap.control.clusters import registry
from dap.control.kube import placing
from dap.control.storage import store

ROUTE_LOCK = 0x64617072  # "dapr": held while routing
# The phases of a moved workspace in its new cluster that end the handover: serving, or scaled to
# zero by its class (it wakes there on demand).
SETTLED_PHASES = ("Ready", "Idle")
KUBE_APP = ""  # bindings of Workspace resources carry no artifact app


async def record_workspace(
    conn: store.Executor, namespace: str, name: str, spec: Mapping[str, Any]
) -> str | None:
    """Insert or refresh a management Workspace's binding; its cluster stays until routed.

    The binding is the workspace id ``name``: a registration that named it already made the row
    (app and artifact), which the Workspace then places. Returns why the Workspace has no binding
    (a name that is no workspace id, or one that a Workspace of another namespace holds), else None.
    """
    if not ids.is_workspace_id(name):
        return (
            f"the name {name!r} is no workspace id (a DNS label: a-z, 0-9 and '-', at most 63); "
            "rename the Workspace"
        )
    holder = await conn.fetchval(
        "INSERT INTO dap_control.deployments AS d (workspace_id, app, cluster_class, region,"
        " requested_cluster, workspace_spec, namespace) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        " ON CONFLICT (workspace_id) DO UPDATE SET cluster_class = EXCLUDED.cluster_class,"
        " region = EXCLUDED.region, requested_cluster = EXCLUDED.requested_cluster,"
        " workspace_spec = EXCLUDED.workspace_spec, namespace = EXCLUDED.namespace, updated_at = now()"
        " WHERE coalesce(d.namespace, EXCLUDED.namespace) = EXCLUDED.namespace"
        " AND (d.cluster_class, d.region, d.requested_cluster, d.workspace_spec, d.namespace)"
        " IS DISTINCT FROM (EXCLUDED.cluster_class, EXCLUDED.region, EXCLUDED.requested_cluster,"
        " EXCLUDED.workspace_spec, EXCLUDED.namespace)"
        " RETURNING namespace",
        name,
        KUBE_APP,
        spec.get("clusterClass"),
        spec.get("region"),
        spec.get("cluster"),
        dict(spec),
        namespace,
    )
    if holder is None:  # unchanged, or held by a Workspace of another namespace
        holder = await conn.fetchval(
            "SELECT namespace FROM dap_control.deployments WHERE workspace_id = $1", name
        )
    if holder is not None and holder != namespace:
        return (
            f"workspace id {name!r} is the Workspace {holder}/{name}: a workspace id is unique in the "
            "region, whatever the namespace; rename one of them"
        )
    return None


async def forget_workspace(conn: store.Executor, namespace: str, name: str) -> None:
    """Drop a deleted management Workspace's binding; a registration's binding (and artifact) stays."""
    await conn.execute(
        "DELETE FROM dap_control.deployments WHERE workspace_id = $1 AND namespace = $2"
        " AND artifact_id IS NULL",
        name,
        namespace,
    )
    await conn.execute(
        "UPDATE dap_control.deployments SET workspace_spec = NULL, namespace = NULL, updated_at = now()"
        " WHERE workspace_id = $1 AND namespace = $2",
        name,
        namespace,
    )
    await conn.execute("DELETE FROM dap_control.workspace_status WHERE workspace_id = $1", name)


async def record_cluster(
    conn: store.Conn, name: str, labels: Mapping[str, str], spec: Mapping[str, Any]
) -> None:
    await registry.upsert_cluster(
        conn,
        name,
        labels=labels,
        status=str(spec.get("state") or "active"),
        max_workspaces=int(spec.get("maxWorkspaces", 100)),
        load=spec.get("load"),
        declared=True,
    )


async def forget_cluster(conn: store.Executor, name: str) -> None:
    await conn.execute("DELETE FROM dap_control.clusters WHERE cluster_id = $1", name)


async def kube_bindings(conn: store.Executor) -> list[store.DeploymentRow]:
    rows = await conn.fetch(
        f"SELECT {store.DEPLOYMENT_COLUMNS} FROM dap_control.deployments"
        " WHERE workspace_spec IS NOT NULL ORDER BY workspace_id"
    )
    return [store.deployment_row(r) for r in rows]


async def route(pool: store.Pool) -> bool:
    """Route every management Workspace by rule 5; True when any binding changed.

    A workspace moves only when its cluster stopped being a candidate (inactive, draining,
    relabelled, gone, or over a lowered maximum): ``routing.choose`` keeps the current one first.
    Decisions are made in memory (``registry.decide``) and only the bindings that changed are
    written, in one statement.
    """
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", ROUTE_LOCK)
        known = {c.cluster_id: c for c in await registry.clusters(conn)}
        stored = await kube_bindings(conn)
        before = {r.workspace_id: (r.cluster_id, r.error) for r in stored}
        # A cluster that was deleted is no candidate and no current host either.
        rows = [
            r if r.cluster_id is None or r.cluster_id in known or r.requested_cluster else _unhosted(r)
            for r in stored
        ]
        changed = [
            r for r in registry.decide(known, rows) if before[r.workspace_id] != (r.cluster_id, r.error)
        ]
        if changed:
            # The cluster a workspace leaves keeps it until the new one reports it Ready
            # (handing_over_from; the first cluster left, if it moves again meanwhile).
            await conn.execute(
                "UPDATE dap_control.deployments d SET cluster_id = u.cluster_id, error = u.error,"
                " handing_over_from = CASE WHEN u.cluster_id IS NOT DISTINCT FROM"
                " coalesce(d.handing_over_from, d.cluster_id) THEN NULL"
                " ELSE coalesce(d.handing_over_from, d.cluster_id) END,"
                " updated_at = now() FROM unnest($1::text[], $2::text[], $3::text[])"
                " AS u(workspace_id, cluster_id, error) WHERE d.workspace_id = u.workspace_id",
                [r.workspace_id for r in changed],
                [r.cluster_id for r in changed],
                [r.error for r in changed],
            )
        handed = await _settle_handovers(conn, list(known))
        if handed or any(r.artifact_id is not None for r in changed):
            # A registered workspace moved: the clusters' snapshots (its artifact) change too.
            await store.bump_snapshot(conn)
        return bool(changed) or handed


async def _settle_handovers(conn: store.Conn, clusters: list[str]) -> bool:
    """End the handovers whose new cluster reports the workspace settled (Ready, or Idle), or whose
    old cluster is gone; True when any ended for a workspace with an artifact."""
    ended = await conn.fetch(
        "UPDATE dap_control.deployments d SET handing_over_from = NULL, updated_at = now()"
        " WHERE d.handing_over_from IS NOT NULL AND (NOT d.handing_over_from = ANY($1::text[])"
        " OR EXISTS (SELECT 1 FROM dap_control.workspace_status s WHERE s.workspace_id = d.workspace_id"
        " AND s.cluster_id = d.cluster_id AND s.phase = ANY($2::text[])))"
        " RETURNING d.artifact_id",
        clusters,
        list(SETTLED_PHASES),
    )
    return any(r["artifact_id"] is not None for r in ended)


def _unhosted(row: store.DeploymentRow) -> store.DeploymentRow:
    return store.DeploymentRow(
        row.workspace_id, row.app, None, None, row.cluster_class, row.region, row.requested_cluster, None
    )


async def placements(pool: store.Pool, cluster: str) -> list[placing.Placement] | None:
    """The workspaces placed on ``cluster``; the pull is also the cluster's heartbeat. None when no
    Cluster resource declares ``cluster`` (a cluster control with a wrong id)."""
    async with pool.acquire() as conn:
        declared = await conn.fetchval(
            "UPDATE dap_control.clusters SET last_pull = now() WHERE cluster_id = $1 AND declared"
            " RETURNING true",
            cluster,
        )
        if not declared:
            return None
        rows = await conn.fetch(
            "SELECT workspace_id, namespace, workspace_spec FROM dap_control.deployments"
            " WHERE (cluster_id = $1 OR handing_over_from = $1) AND workspace_spec IS NOT NULL"
            " ORDER BY workspace_id",
            cluster,
        )
    return [placing.Placement(r["workspace_id"], r["namespace"], r["workspace_spec"]) for r in rows]


async def bindings(pool: store.Pool) -> list[placing.Binding]:
    """Every management Workspace's binding, with the report of the cluster hosting it."""
    rows = await pool.fetch(
        "SELECT d.workspace_id, d.namespace, d.cluster_id, d.error, d.requested_cluster,"
        " d.handing_over_from, s.phase, s.conditions"
        " FROM dap_control.deployments d LEFT JOIN dap_control.workspace_status s"
        " ON s.workspace_id = d.workspace_id AND s.cluster_id = d.cluster_id"
        " WHERE d.workspace_spec IS NOT NULL ORDER BY d.workspace_id"
    )
    return [
        placing.Binding(
            workspace=r["workspace_id"],
            namespace=r["namespace"],
            cluster=r["cluster_id"],
            error=r["error"],
            requested_cluster=r["requested_cluster"],
            handing_over_from=r["handing_over_from"],
            report=(r["phase"], list(r["conditions"])) if r["phase"] else None,
        )
        for r in rows
    ]


async def cluster_views(pool: store.Pool) -> dict[str, tuple[str, int, datetime | None]]:
    """Cluster id -> (routing status, workspaces placed on it, last pull of its placements)."""
    rows = await pool.fetch(
        "SELECT c.cluster_id, c.status, c.last_pull, (SELECT count(*) FROM dap_control.deployments d"
        " WHERE d.cluster_id = c.cluster_id) AS hosted FROM dap_control.clusters c"
    )
    return {
        r["cluster_id"]: (
            r["status"],
            int(r["hosted"]),
            r["last_pull"].astimezone(UTC) if r["last_pull"] else None,
        )
        for r in rows
    }
