"""Freezes in Postgres: set (with the holds of the covered workspaces), lift, list, expire.

Each change is one transaction that also appends a ``freeze``/``lift`` entry to the transparency
log and bumps the snapshot version, so every control process on the database reloads (NOTIFY)
and serves the new desired state on its next answer: a lift reaches pods in one pull interval.
``expire`` is run periodically by serving controls: the first process to see a freeze past its
end marks it ``ended`` and bumps the snapshot; the others find nothing to do.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from dap.control import errors
from dap.control.storage import store
from dap.control.supply import freezes, transparency
from dap.control.trust import signing, snapshots

COLUMNS = "freeze_id, scope, target, reason, created_at, ends_at, lifted_at"


async def set_freeze(
    conn: store.Conn,
    *,
    scope: str,
    target: str,
    reason: str,
    ends_at: datetime,
    signer: signing.Signer | None = None,
    now: datetime | None = None,
) -> freezes.Freeze:
    if scope not in freezes.SCOPES:
        raise errors.RequestError(f"unknown freeze scope {scope!r}")
    if not reason.strip():
        raise errors.RequestError("a freeze needs a reason", [errors.ErrorItem("reason", "required")])
    created = (now or datetime.now(UTC)).replace(microsecond=0)
    freeze = freezes.Freeze(f"frz-{uuid.uuid4().hex[:12]}", scope, target, reason.strip(), created, ends_at)
    await conn.execute(
        f"INSERT INTO dap_control.freezes ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, NULL)",
        freeze.freeze_id,
        scope,
        target,
        freeze.reason,
        created,
        ends_at,
    )
    await conn.execute(
        "INSERT INTO dap_control.freeze_holds (freeze_id, workspace_id, artifact_id)"
        " SELECT $1, d.workspace_id, d.artifact_id FROM dap_control.deployments d"
        " WHERE d.artifact_id IS NOT NULL AND ($2 = 'environment'"
        " OR ($2 = 'app' AND d.app = $3) OR ($2 = 'workspace' AND d.workspace_id = $3))",
        freeze.freeze_id,
        scope,
        target,
    )
    await transparency.append(conn, [_entry("freeze", freeze, created)], signer=signer)
    await store.bump_snapshot(conn)
    return freeze


def _entry(kind: str, freeze: freezes.Freeze, at: datetime) -> dict[str, object]:
    return {
        "type": kind,
        "freeze_id": freeze.freeze_id,
        "scope": freeze.scope,
        "target": freeze.target,
        "reason": freeze.reason,
        "ends_at": snapshots.timestamp(freeze.ends_at),
        "at": snapshots.timestamp(at),
        **({"app": freeze.target} if freeze.scope == "app" else {}),
    }


def _freeze(row: object) -> freezes.Freeze:
    return freezes.Freeze(**dict(row))  # type: ignore[call-overload]


async def lift(
    conn: store.Conn, freeze_id: str, *, signer: signing.Signer | None = None, now: datetime | None = None
) -> freezes.Freeze:
    moment = (now or datetime.now(UTC)).replace(microsecond=0)
    row = await conn.fetchrow(
        f"UPDATE dap_control.freezes SET lifted_at = $2 WHERE freeze_id = $1 AND lifted_at IS NULL"
        f" RETURNING {COLUMNS}",
        freeze_id,
        moment,
    )
    if row is None:
        exists = await conn.fetchval("SELECT 1 FROM dap_control.freezes WHERE freeze_id = $1", freeze_id)
        if exists is None:
            raise errors.NotFoundError(f"freeze {freeze_id} does not exist")
        raise errors.RequestError(f"freeze {freeze_id} was already lifted")
    freeze = _freeze(row)
    await transparency.append(conn, [_entry("lift", freeze, moment)], signer=signer)
    await store.bump_snapshot(conn)
    return freeze


async def listing(conn: store.Executor, *, include_ended: bool) -> list[freezes.Freeze]:
    rows = await conn.fetch(
        f"SELECT {COLUMNS} FROM dap_control.freezes"
        " WHERE $1 OR (lifted_at IS NULL AND ends_at > now()) ORDER BY created_at, freeze_id",
        include_ended,
    )
    return [_freeze(r) for r in rows]


async def expire(pool: store.Pool) -> int:
    """Bump the snapshot once for the freezes whose end passed; return how many ended."""
    async with pool.acquire() as conn, conn.transaction():
        ended = await conn.fetch(
            "UPDATE dap_control.freezes SET ended = true"
            " WHERE NOT ended AND lifted_at IS NULL AND ends_at <= now() RETURNING freeze_id"
        )
        if ended:
            await store.bump_snapshot(conn)
    return len(ended)
