"""Evidence storage: accepted records, the query of platform operators, the cluster outbox.

Records are keyed by their idempotency ``id``; inserting one that exists does nothing, which is
what makes relays safe to retry. A cluster writes each accepted record to ``evidence`` (so it is
queryable locally) and to ``outbox`` in the same transaction; the relay deletes outbox rows only
after the region answered 202.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dap.control.evidence import models
from dap.control.storage import store


async def insert(conn: store.Conn, records: Sequence[models.AnyRecord], *, outbox: bool) -> int:
    """Store records (and queue the new ones for relay when ``outbox``); return how many were new."""
    bodies = {r.id: models.as_json(r) for r in records}
    rows = await conn.fetch(
        "INSERT INTO dap_control.evidence (id, type, workspace_id, cluster_id, at, record)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"
        " $5::timestamptz[], $6::jsonb[])"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        [r.id for r in records],
        [r.type for r in records],
        [r.workspace_id for r in records],
        [r.cluster_id for r in records],
        [r.at for r in records],
        [bodies[r.id] for r in records],
    )
    new = [r["id"] for r in rows]
    if outbox and new:
        await conn.execute(
            "INSERT INTO dap_control.outbox (record_id, record)"
            " SELECT * FROM unnest($1::text[], $2::jsonb[]) ON CONFLICT (record_id) DO NOTHING",
            new,
            [bodies[i] for i in new],
        )
    return len(new)


async def query(
    conn: store.Executor,
    *,
    workspace: str | None,
    kind: str | None,
    since: datetime | None,
    limit: int,
) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT record, received_at FROM dap_control.evidence"
        " WHERE ($1::text IS NULL OR workspace_id = $1) AND ($2::text IS NULL OR type = $2)"
        " AND ($3::timestamptz IS NULL OR at >= $3) ORDER BY at, id LIMIT $4",
        workspace,
        kind,
        since,
        limit,
    )
    return [{**r["record"], "received_at": r["received_at"].isoformat()} for r in rows]


async def outbox_batch(conn: store.Executor, limit: int) -> list[tuple[int, dict[str, Any]]]:
    rows = await conn.fetch("SELECT seq, record FROM dap_control.outbox ORDER BY seq LIMIT $1", limit)
    return [(r["seq"], r["record"]) for r in rows]


async def outbox_done(conn: store.Executor, up_to_seq: int) -> None:
    await conn.execute("DELETE FROM dap_control.outbox WHERE seq <= $1", up_to_seq)


async def outbox_size(conn: store.Executor) -> int:
    size: int = await conn.fetchval("SELECT count(*) FROM dap_control.outbox")
    return size
