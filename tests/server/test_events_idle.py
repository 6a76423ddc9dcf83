"""The events dispatcher's wait between rounds, on a real Postgres (its own database)."""

from __future__ import annotations

import uuid

import asyncpg

from dap.server.events import dispatcher, outbox


async def test_an_idle_dispatcher_waits_its_whole_poll(pg_dsn: str) -> None:
    """The next-retry query is NULL when no row waits for a retry, so an idle dispatcher sleeps for
    its poll; it once answered 0 there (``greatest`` skips NULLs), and every idle server ran four
    statements twenty times a second."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await outbox.ensure_schema(conn)
        await conn.execute("DELETE FROM dap.outbox")
        assert await conn.fetchval(dispatcher.DUE) is None
        tenant = uuid.uuid4()
        await conn.execute(
            "INSERT INTO dap.outbox (tenant_id, entity, action, event, payload, attempts, next_at) "
            "VALUES ($1, 'shop/order', 'update', 'updated', '{}', 0, now()), "  # new: NOTIFY wakes it
            "($1, 'shop/order', 'update', 'updated', '{}', 2, now() + interval '30 seconds')",
            tenant,
        )
        assert 25 < await conn.fetchval(dispatcher.DUE) <= 30  # the retry, not the new row
        await conn.execute("UPDATE dap.outbox SET next_at = now() - interval '5 seconds' WHERE attempts = 2")
        assert await conn.fetchval(dispatcher.DUE) <= -4  # overdue: the loop's 50 ms floor applies
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
    finally:
        await conn.close()
