"""The archive: documents of closed periods moved out of the hot tables (issue 43).

An entity declaring ``archive: {after, retain}`` (a dated transaction entity with a lifecycle)
has its submitted and cancelled documents moved by :func:`run` once they are dated more than
``after`` ago *and* in a closed period: each becomes one row of ``dap.archive`` -- the record as
the REST API presents it, child rows included -- and leaves its table and child tables, in one
transaction per batch, with an ``archive`` row in the audit trail. The hot table then holds only
what is still being worked on, so its finds and lists do not slow down as the archive grows
(``bench/archive.py``): the archive is one table of its own, keyed ``(tenant_id, entity, id)``.

An archived record is still readable (``find``, ``list`` through ``web.archive``) and is
locked for deletion until ``retain_until`` (``archived_at + retain``) and for as long as a legal
hold is set: a delete before then -- by anyone, admin included, through the archive or the record's
usual path -- is 409 ``SVC.ARCHIVE.LOCKED_FOR_DELETION``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg

from dap.config import durations
from dap.server import errors
from dap.server.catalog import Catalog, Resource
from dap.server.documents import reading
from dap.server.storage import caching, db, tables

LOCKED = "SVC.ARCHIVE.LOCKED_FOR_DELETION"
NOT_FOUND = "SVC.RECORD.NOT_FOUND"
BATCH = 500

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.archive (
    tenant_id uuid NOT NULL,
    entity text NOT NULL,
    id uuid NOT NULL,
    record jsonb NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    retain_until timestamptz NOT NULL,
    legal_hold boolean NOT NULL DEFAULT false,
    hold_reason text,
    PRIMARY KEY (tenant_id, entity, id)
);
"""
COLUMNS = "id, record, archived_at, retain_until, legal_hold, hold_reason"


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


def view(row: asyncpg.Record) -> dict[str, Any]:
    """An archived record as served: the record, and ``_archive`` saying since when and until when."""
    record = dict(row["record"])
    record["_archive"] = {
        "archived_at": row["archived_at"].isoformat(),
        "retain_until": row["retain_until"].isoformat(),
        "legal_hold": row["legal_hold"],
        "hold_reason": row["hold_reason"],
    }
    return record


def _eligible(resource: Resource, column: str) -> str:
    table, col = tables.quote(resource.table.name), tables.quote(column)
    return (
        f"SELECT {resource.table.select_columns} FROM {table} t WHERE t.tenant_id = $1 AND t.docstatus <> 0 "
        f"AND t.{col} <= now() - $2::interval AND EXISTS (SELECT 1 FROM dap.periods p WHERE "
        f"p.tenant_id = $1 AND p.state = 'closed' AND p.starts <= t.{col}::date AND p.ends >= t.{col}::date) "
        f"ORDER BY t.id LIMIT $3 FOR UPDATE SKIP LOCKED"
    )


async def run(
    conn: db.Connection, catalog: Catalog, resource: Resource, tenant: uuid.UUID, column: str, actor: str
) -> int:
    """Archive the eligible documents of ``resource`` (``column``: its transaction date), a batch
    per transaction; how many moved."""
    decl = resource.spec.archive
    assert decl is not None
    after, retain = durations.parse(decl.after), durations.parse(decl.retain)
    moved = 0
    while True:
        async with db.committed(conn):
            rows = await conn.fetch(_eligible(resource, column), tenant, after, BATCH)
            if not rows:
                return moved
            ids = [r["id"] for r in rows]
            kids = (
                await reading.load_children(conn, resource, tenant, ids, catalog) if resource.children else {}
            )
            until = dt.datetime.now(dt.UTC) + retain
            await conn.executemany(
                "INSERT INTO dap.archive (tenant_id, entity, id, record, retain_until) "
                "VALUES ($1, $2, $3, $4, $5)",
                [
                    (tenant, resource.key, r["id"], reading.present(resource, r, kids.get(r["id"])), until)
                    for r in rows
                ],
            )
            for child in resource.children.values():
                await conn.execute(
                    f"DELETE FROM {tables.quote(child.name)} "
                    "WHERE tenant_id = $1 AND parent_id = ANY($2::uuid[])",
                    tenant,
                    ids,
                )
            await conn.execute(
                f"DELETE FROM {tables.quote(resource.table.name)} "
                "WHERE tenant_id = $1 AND id = ANY($2::uuid[])",
                tenant,
                ids,
            )
            await conn.executemany(
                "INSERT INTO dap.audit_log (tenant_id, entity, record_id, action, actor_sub, actor_username, "
                "version, changes) VALUES ($1, $2, $3, 'archive', $4, $4, $5, '{}'::jsonb)",
                [(tenant, resource.key, r["id"], actor, r["version"]) for r in rows],
            )
            for record_id in ids:
                await caching.announce(conn, resource, tenant, record_id)
            moved += len(rows)


async def find(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID
) -> asyncpg.Record:
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.archive WHERE tenant_id = $1 AND entity = $2 AND id = $3",
        tenant,
        resource.key,
        record_id,
    )
    if row is None:
        raise errors.NotFound(f"no archived {resource.key} {record_id}", code=NOT_FOUND)
    return row


async def listed(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, limit: int, offset: int
) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM dap.archive WHERE tenant_id = $1 AND entity = $2 "
            "ORDER BY id LIMIT $3 OFFSET $4",
            tenant,
            resource.key,
            limit,
            offset,
        )
    )


def locked(row: asyncpg.Record, now: dt.datetime) -> str | None:
    """Why the archived ``row`` cannot be deleted yet (its message), or ``None``. Pure."""
    if row["legal_hold"]:
        why = f" ({row['hold_reason']})" if row["hold_reason"] else ""
        return f"the record is under a legal hold{why}; lift the hold first"
    if row["retain_until"] > now:
        return f"the record is retained until {row['retain_until'].isoformat()}; it cannot be deleted before"
    return None


async def delete(conn: db.Connection, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID) -> None:
    """Delete an archived record past its retention and not on hold; else 409 ``LOCKED``."""
    async with db.committed(conn):
        row = await conn.fetchrow(
            f"SELECT {COLUMNS} FROM dap.archive WHERE tenant_id = $1 AND entity = $2 AND id = $3 FOR UPDATE",
            tenant,
            resource.key,
            record_id,
        )
        if row is None:
            raise errors.NotFound(f"no archived {resource.key} {record_id}", code=NOT_FOUND)
        why = locked(row, dt.datetime.now(dt.UTC))
        if why is not None:
            raise errors.Conflict(why, code=LOCKED)
        await conn.execute(
            "DELETE FROM dap.archive WHERE tenant_id = $1 AND entity = $2 AND id = $3",
            tenant,
            resource.key,
            record_id,
        )


async def refuse_if_archived(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID
) -> None:
    """For a delete through the record's usual path of a record no longer in its table: 409
    ``LOCKED`` while the archive keeps it locked; nothing otherwise (the caller answers 404)."""
    if resource.spec.archive is None:
        return
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.archive WHERE tenant_id = $1 AND entity = $2 AND id = $3",
        tenant,
        resource.key,
        record_id,
    )
    if row is None:
        return
    why = locked(row, dt.datetime.now(dt.UTC))
    if why is not None:
        raise errors.Conflict(f"{resource.key} {record_id} is archived: {why}", code=LOCKED)
    raise errors.NotFound(
        f"{resource.key} {record_id} is archived; delete it through /_archive/{resource.key}/{record_id}",
        code=NOT_FOUND,
    )


async def hold(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    on: bool,
    reason: str | None,
) -> asyncpg.Record:
    row = await conn.fetchrow(
        f"UPDATE dap.archive SET legal_hold = $4, hold_reason = $5 WHERE tenant_id = $1 AND entity = $2 "
        f"AND id = $3 RETURNING {COLUMNS}",
        tenant,
        resource.key,
        record_id,
        on,
        reason if on else None,
    )
    if row is None:
        raise errors.NotFound(f"no archived {resource.key} {record_id}", code=NOT_FOUND)
    return row
