"""The background loops' waits between rounds, on a real Postgres (this module's own database):
how long an idle dispatcher sleeps, and that every loop stops when stopped as it is woken."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from dap.server import state
from dap.server.events import dispatcher, outbox
from dap.server.web import jobs

from .conftest import running


async def test_an_idle_dispatcher_waits_its_whole_poll(pg_dsn: str) -> None:
    """The next-retry query is NULL when no row waits for a retry, so an idle dispatcher sleeps for
    its poll; it once answered 0 there (``greatest`` skips NULLs), and every idle server ran four
    statements twenty times a second."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await outbox.ensure_schema(conn)
        await conn.execute("DELETE FROM dap.outbox")
        assert await conn.fetchval(dispatcher.DUE, None) is None
        tenant = uuid.uuid4()
        await conn.execute(
            "INSERT INTO dap.outbox (tenant_id, entity, action, event, payload, attempts, next_at) "
            "VALUES ($1, 'shop/order', 'update', 'updated', '{}', 0, now()), "  # new: NOTIFY wakes it
            "($1, 'shop/order', 'update', 'updated', '{}', 2, now() + interval '30 seconds')",
            tenant,
        )
        assert 25 < await conn.fetchval(dispatcher.DUE, None) <= 30  # the retry, not the new row
        await conn.execute("UPDATE dap.outbox SET next_at = now() - interval '5 seconds' WHERE attempts = 2")
        assert await conn.fetchval(dispatcher.DUE, None) <= -4  # overdue: the loop's 50 ms floor applies
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
    finally:
        await conn.close()


async def test_a_dispatcher_for_one_tenant_leaves_the_others_events(pg_dsn: str) -> None:
    """Resource pods of different workspaces may share one database: a dispatcher given its
    tenants (``Settings.tenants``) claims only their rows, so another workspace's events are never
    settled with a catalog that lacks their declarations (the kind suite lost webhooks so)."""
    conn = await asyncpg.connect(pg_dsn)
    mine, other = uuid.uuid4(), uuid.uuid4()
    try:
        await outbox.ensure_schema(conn)
        await conn.execute(
            "INSERT INTO dap.outbox (tenant_id, entity, action, event, payload, attempts, next_at) "
            "VALUES ($1, 'shop/order', 'create', 'created', '{}', 0, now()), "
            "($2, 'shop/order', 'create', 'created', '{}', 0, now()), "
            "($2, 'shop/order', 'update', 'updated', '{}', 3, now() - interval '5 seconds')",
            mine,
            other,
        )
        async with conn.transaction():
            rows = await conn.fetch(dispatcher.CLAIM, 100, [mine])
        assert {r["tenant_id"] for r in rows} == {mine}
        assert await conn.fetchval(dispatcher.DUE, [mine]) is None  # the other's retry is not ours
        assert await conn.fetchval(dispatcher.DUE, [other]) <= -4
        async with conn.transaction():
            everyone = await conn.fetch(dispatcher.CLAIM, 100, None)
        assert {mine, other} <= {r["tenant_id"] for r in everyone}  # no tenants given: all of them
    finally:
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = ANY($1::uuid[])", [mine, other])
        await conn.close()


async def test_the_loops_stop_when_stopped_as_they_are_woken(pg_dsn: str) -> None:
    """On Python 3.11 ``asyncio.wait_for`` returns the inner result and drops the cancel when both
    come in the same turn of the loop: a loop waiting on ``wait_for(event.wait(), t)`` that was
    stopped as it was woken went on forever, and its server's shutdown with it (the resource
    pod's tests hung so once). A wake-up and a stop in the same turn, several times a loop."""
    async with running(pg_dsn) as srv:
        events = srv.server.app[state.EVENTS]
        worker = srv.server.app[jobs.WORKER]
        for _ in range(3):
            await asyncio.sleep(0.3)  # each loop idle in its wait
            events.dispatcher.wake()
            events.feed._wake.set()  # the feed is woken by its listener
            worker.wake()
            started = asyncio.get_running_loop().time()
            # bounds the test: a stop that hangs is then given up (it swallows the cancel)
            async with asyncio.timeout(5):
                await events.dispatcher.stop()
                await events.feed.stop()
                await worker.stop()
            assert asyncio.get_running_loop().time() - started < 4, "a loop did not stop when stopped"
            events.dispatcher.start()
            events.feed.start()
            await worker.start()
