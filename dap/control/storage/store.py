"""Postgres access of the control plane (asyncpg): pool, artifacts, deployments, snapshot state.

One pool per process, created by ``connect`` and stored by the HTTP layer under a typed AppKey.
Functions here take a connection (or the pool) as their first argument so that callers compose
them inside one transaction; every statement is parameterised. asyncpg's errors are translated
into ``errors.StoreUnavailableError`` at the boundary (``connect``); constraint violations are
branched on by SQLSTATE class where the logic needs them.

Evidence, cluster registry and cluster-mode cache queries live in ``evidence.storing``,
``clusters.registry`` and ``clusters.caches``, and what a snapshot deploys once freezes and
promotions apply in ``supply.contents``, to keep this module about tables and rows.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias

import asyncpg

from dap.control import errors
from dap.control.ids import AppName, ArtifactId, ClusterId, WorkspaceId
from dap.control.storage import schema

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
