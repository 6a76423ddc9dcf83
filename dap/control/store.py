"""Postgres access of the control plane (asyncpg): pool, artifacts, deployments, snapshot state.

One pool per process, created by ``connect`` and stored by the HTTP layer under a typed AppKey.
Functions here take a connection (or the pool) as their first argument so that callers compose
them inside one transaction; every statement is parameterised. asyncpg's errors are translated
into ``errors.StoreUnavailableError`` at the boundary (``connect``); constraint violations are
branched on by SQLSTATE class where the logic needs them.

Evidence, cluster registry and cluster-mode cache queries live in ``reports_store`` and
``cluster_store`` to keep this module about the desired state.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg

from dap.control import errors, freezes, promotions, schema, snapshots
from dap.control.ids import AppName, ArtifactId, ClusterId, WorkspaceId

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]
    Conn: TypeAlias = schema.Conn
    Executor: TypeAlias = Conn | Pool


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(kind, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect(dsn: str, *, min_size: int = 1, max_size: int = 10) -> Pool:
    """Create the process's pool and migrate the schema."""
    try:
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init_connection)
        async with pool.acquire() as conn:
            version = await schema.migrate(conn)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.StoreUnavailableError(f"cannot open the control database: {exc}") from exc
    log.info("control store ready", extra={"ctx": {"schema_version": version}})
    return pool


@dataclass(frozen=True)
class ArtifactRow:
    artifact_id: ArtifactId
    app: AppName
    version: int
    sha256: str
    status: str


@dataclass(frozen=True)
class DeploymentRow:
    workspace_id: WorkspaceId
    app: AppName
    artifact_id: ArtifactId | None
    cluster_id: ClusterId | None
    cluster_class: str | None
    region: str | None
    requested_cluster: ClusterId | None
    error: str | None


def _artifact(row: asyncpg.Record) -> ArtifactRow:
    return ArtifactRow(
        ArtifactId(row["artifact_id"]), AppName(row["app"]), row["version"], row["sha256"], row["status"]
    )


async def lock_app(conn: Conn, app: str) -> None:
    """Serialise registrations of one app until the end of the transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"dap_control.app:{app}")


async def latest_artifact(conn: Executor, app: str) -> ArtifactRow | None:
    row = await conn.fetchrow(
        "SELECT artifact_id, app, version, sha256, status FROM dap_control.artifacts"
        " WHERE app = $1 ORDER BY version DESC LIMIT 1",
        app,
    )
    return _artifact(row) if row else None


async def artifact(conn: Executor, artifact_id: str) -> ArtifactRow | None:
    row = await conn.fetchrow(
        "SELECT artifact_id, app, version, sha256, status FROM dap_control.artifacts WHERE artifact_id = $1",
        artifact_id,
    )
    return _artifact(row) if row else None


async def insert_artifact(
    conn: Conn,
    *,
    artifact_id: str,
    app: str,
    version: int,
    sha256: str,
    signing_key_id: str,
    envelope: bytes,
    files: list[tuple[str, str, int]],
    created_at: datetime,
) -> None:
    """Store an envelope and its file list; ``files`` are ``(path, sha256, size)``."""
    await conn.execute(
        "INSERT INTO dap_control.artifacts"
        " (artifact_id, app, version, sha256, signing_key_id, size_bytes, created_at, envelope)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        artifact_id,
        app,
        version,
        sha256,
        signing_key_id,
        sum(size for _, _, size in files),
        created_at,
        envelope,
    )
    await conn.copy_records_to_table(
        "artifact_files",
        schema_name=schema.SCHEMA,
        columns=["artifact_id", "path", "sha256", "size_bytes"],
        records=[(artifact_id, path, digest, size) for path, digest, size in files],
    )


async def envelope_bytes(conn: Executor, artifact_id: str) -> tuple[bytes, str] | None:
    """The signed envelope and the artifact's status, or None."""
    row = await conn.fetchrow(
        "SELECT envelope, status FROM dap_control.artifacts WHERE artifact_id = $1", artifact_id
    )
    return (bytes(row["envelope"]), str(row["status"])) if row else None


DEPLOYMENT_COLUMNS = (
    "workspace_id, app, artifact_id, cluster_id, cluster_class, region, requested_cluster, error"
)


def deployment_row(r: asyncpg.Record) -> DeploymentRow:
    """One ``dap_control.deployments`` row (its ``DEPLOYMENT_COLUMNS``) as a ``DeploymentRow``."""
    return DeploymentRow(
        WorkspaceId(r["workspace_id"]),
        AppName(r["app"]),
        ArtifactId(r["artifact_id"]) if r["artifact_id"] else None,
        ClusterId(r["cluster_id"]) if r["cluster_id"] else None,
        r["cluster_class"],
        r["region"],
        ClusterId(r["requested_cluster"]) if r["requested_cluster"] else None,
        r["error"],
    )


async def deployments(conn: Executor, *, app: str | None = None) -> list[DeploymentRow]:
    rows = await conn.fetch(
        f"SELECT {DEPLOYMENT_COLUMNS} FROM dap_control.deployments"
        " WHERE $1::text IS NULL OR app = $1 ORDER BY workspace_id",
        app,
    )
    return [deployment_row(r) for r in rows]


async def upsert_deployment(conn: Conn, row: DeploymentRow) -> bool:
    """Insert or update a binding; return True when anything changed."""
    result = await conn.execute(
        "INSERT INTO dap_control.deployments AS d"
        " (workspace_id, app, artifact_id, cluster_id, cluster_class, region, requested_cluster, error)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        " ON CONFLICT (workspace_id) DO UPDATE SET app = EXCLUDED.app, artifact_id = EXCLUDED.artifact_id,"
        " cluster_id = EXCLUDED.cluster_id, cluster_class = EXCLUDED.cluster_class,"
        " region = EXCLUDED.region, requested_cluster = EXCLUDED.requested_cluster,"
        " error = EXCLUDED.error, updated_at = now()"
        " WHERE (d.app, d.artifact_id, d.cluster_id, d.cluster_class, d.region, d.requested_cluster, d.error)"
        " IS DISTINCT FROM (EXCLUDED.app, EXCLUDED.artifact_id, EXCLUDED.cluster_id, EXCLUDED.cluster_class,"
        " EXCLUDED.region, EXCLUDED.requested_cluster, EXCLUDED.error)",
        row.workspace_id,
        row.app,
        row.artifact_id,
        row.cluster_id,
        row.cluster_class,
        row.region,
        row.requested_cluster,
        row.error,
    )
    return result.endswith(" 1")


async def bump_snapshot(conn: Conn) -> int:
    """Increment the snapshot version and tell every control process on this database."""
    version: int = await conn.fetchval(
        "UPDATE dap_control.snapshot_state SET version = version + 1, changed_at = now() RETURNING version"
    )
    await conn.execute("SELECT pg_notify($1, $2)", schema.NOTIFY_CHANNEL, str(version))
    return version


async def snapshot_content(
    conn: Executor, *, environment: str = "", now: datetime | None = None
) -> tuple[int, list[snapshots.Deployment]]:
    """The snapshot version and the deployments it names: active artifacts, promotion rules and
    freezes applied (``promotions``, ``freezes``)."""
    async with _maybe_acquire(conn) as c, c.transaction(isolation="repeatable_read", readonly=True):
        version: int = await c.fetchval("SELECT version FROM dap_control.snapshot_state")
        moment: datetime = now or await c.fetchval("SELECT now()")
        rows = await c.fetch(
            "SELECT d.workspace_id, d.app, d.cluster_id, d.handing_over_from, a.artifact_id, a.sha256"
            " FROM dap_control.deployments d"
            " LEFT JOIN dap_control.artifacts a ON a.artifact_id = d.artifact_id AND a.status = 'active'"
            " WHERE d.artifact_id IS NOT NULL ORDER BY d.workspace_id"
        )
        frozen = await c.fetch(
            "SELECT freeze_id, scope, target, reason, created_at, ends_at, lifted_at FROM dap_control.freezes"
            " WHERE lifted_at IS NULL AND ends_at > $1",
            moment,
        )
        promoted = await _promotion_choices(c, [r for r in rows if r["artifact_id"]], moment)
        holds = await c.fetch(
            "SELECT h.freeze_id, h.workspace_id, h.artifact_id, a.sha256, a.status = 'active' AS active"
            " FROM dap_control.freeze_holds h JOIN dap_control.artifacts a USING (artifact_id)"
            " WHERE h.freeze_id = ANY($1::text[])",
            [f["freeze_id"] for f in frozen],
        )
    bindings = []
    for r in rows:
        artifact, sha256 = r["artifact_id"], r["sha256"]
        if r["workspace_id"] in promoted:  # a production workspace of a promotion rule
            choice = promoted[r["workspace_id"]]
            artifact, sha256 = (choice.artifact_id, choice.sha256) if choice else (None, None)
        bindings.append(freezes.Binding(r["workspace_id"], r["app"], r["cluster_id"], artifact, sha256))
    desired = freezes.desired(
        bindings,
        [freezes.Freeze(**dict(f)) for f in frozen],
        {
            (h["freeze_id"], h["workspace_id"]): freezes.Hold(h["artifact_id"], h["sha256"], h["active"])
            for h in holds
        },
        environment=environment,
        now=moment,
    )
    # A workspace handed over between clusters is in both clusters' snapshots until the new one
    # serves it (dap.control.kube.bindings), so the pods of the old one keep their artifact.
    leaving = {r["workspace_id"]: r["handing_over_from"] for r in rows if r["handing_over_from"]}
    kept = [
        snapshots.Deployment(**{**d, "cluster_id": leaving[d["workspace_id"]]})
        for d in desired
        if d["workspace_id"] in leaving
    ]
    return version, desired + kept


async def _promotion_choices(
    conn: Conn, rows: list[asyncpg.Record], now: datetime
) -> dict[str, promotions.Candidate | None]:
    """For each production workspace of a promotion rule, the artifact it may run (or None)."""
    rules = await conn.fetch("SELECT app, sources, targets, after_seconds FROM dap_control.promotions")
    out: dict[str, promotions.Candidate | None] = {}
    for rule in rules:
        targets = [r for r in rows if r["app"] == rule["app"] and r["workspace_id"] in rule["targets"]]
        if not targets:
            continue
        artifacts = await conn.fetch(
            "SELECT artifact_id, version, sha256 FROM dap_control.artifacts"
            " WHERE app = $1 AND status = 'active'",
            rule["app"],
        )
        versions = {a["artifact_id"]: a["version"] for a in artifacts}
        # the control's own clock (``received_at``), never the reporter's ``at``: a report dated
        # in the past must not skip the soak, nor one dated ahead postpone it (docs/control.md)
        evidence = await conn.fetch(
            "SELECT record->>'artifact_id' AS artifact_id,"
            " min(received_at) FILTER (WHERE type = 'deploy_status'"
            " AND record->>'phase' IN ('loaded', 'up_to_date')) AS first_running,"
            " coalesce(bool_or(type = 'violation' OR (type = 'deploy_status'"
            " AND record->>'phase' IN ('failed', 'rolled_back'))), false) AS failed"
            " FROM dap_control.evidence WHERE workspace_id = ANY($1::text[])"
            " AND record->>'artifact_id' = ANY($2::text[]) GROUP BY 1",
            list(rule["sources"]),
            list(versions),
        )
        unhealthy = await conn.fetch(
            "SELECT received_at FROM dap_control.evidence WHERE type = 'health'"
            " AND workspace_id = ANY($1::text[]) AND record->>'status' = 'unhealthy'"
            " ORDER BY received_at DESC LIMIT 1000",
            list(rule["sources"]),
        )
        records = {e["artifact_id"]: promotions.Record(e["first_running"], e["failed"]) for e in evidence}
        for target in targets:
            ceiling = versions.get(target["artifact_id"], 0)
            out[target["workspace_id"]] = promotions.promoted(
                [
                    promotions.Candidate(a["artifact_id"], a["version"], a["sha256"])
                    for a in artifacts
                    if a["version"] <= ceiling
                ],
                records,
                [u["received_at"] for u in unhealthy],
                after=timedelta(seconds=rule["after_seconds"]),
                now=now,
            )
    return out


class _maybe_acquire:  # noqa: N801 - used as a context manager like a function
    """``async with`` a connection: the given one, or one acquired from the pool."""

    def __init__(self, conn: Executor) -> None:
        self._given = conn
        self._acquired: Any = None

    async def __aenter__(self) -> Conn:
        if isinstance(self._given, asyncpg.Pool):
            self._acquired = self._given.acquire()
            conn: Conn = await self._acquired.__aenter__()
            return conn
        return self._given

    async def __aexit__(self, *exc: object) -> None:
        if self._acquired is not None:
            await self._acquired.__aexit__(*exc)


async def revoke(conn: Conn, artifact_id: str) -> list[WorkspaceId]:
    """Mark an artifact revoked; point its workspaces at the app's newest active earlier version.

    Returns the workspaces that were moved. Raises ``NotFoundError`` for an unknown id. Workspaces
    with no earlier active version keep the binding, and snapshots leave them out.
    """
    row = await artifact(conn, artifact_id)
    if row is None:
        raise errors.NotFoundError(f"artifact {artifact_id} does not exist")
    await lock_app(conn, row.app)
    await conn.execute(
        "UPDATE dap_control.artifacts SET status = 'revoked', revoked_at = now()"
        " WHERE artifact_id = $1 AND status = 'active'",
        artifact_id,
    )
    fallback = await conn.fetchval(
        "SELECT artifact_id FROM dap_control.artifacts"
        " WHERE app = $1 AND status = 'active' AND version < $2 ORDER BY version DESC LIMIT 1",
        row.app,
        row.version,
    )
    moved: list[WorkspaceId] = []
    if fallback is not None:
        rows = await conn.fetch(
            "UPDATE dap_control.deployments SET artifact_id = $2, updated_at = now()"
            " WHERE artifact_id = $1 RETURNING workspace_id",
            artifact_id,
            fallback,
        )
        moved = [WorkspaceId(r["workspace_id"]) for r in rows]
    await bump_snapshot(conn)
    return moved
