"""The background loops' waits between rounds, on a real Postgres (this module's own database):
how long an idle dispatcher sleeps, and that every loop stops when stopped as it is woken."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from dap import config
from dap.config.events import DeliveryTarget
from dap.server import booting, state
from dap.server.catalog import Catalog
from dap.server.events import channels, dispatcher, measures, outbox
from dap.server.storage import db
from dap.server.web import jobs

from . import events_worker
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


async def test_a_stop_lets_the_batch_in_flight_commit(pg_dsn: str) -> None:
    """A pod being replaced stops its dispatcher while a batch's deliveries are out: the batch
    commits (its effects and its settled rows) instead of being rolled back and delivered again by
    another process, which a webhook receiver saw as the same id twice. A batch that outlasts the
    grace is still cancelled, so a stop always ends."""
    spec = config.load_files(events_worker.FILES)
    catalog = Catalog.from_spec(spec)
    specs = {e.key: e.spec for e in spec.entities.values()}
    pool = await db.open_pool(pg_dsn, 3)
    conn = await asyncpg.connect(pg_dsn)
    tenant = uuid.uuid4()
    try:
        await booting.prepare_database(pool, catalog)
        await conn.execute(events_worker.EFFECTS)
        out, delay = asyncio.Event(), [0.5]

        async def slow_effect(c: db.Connection, event: channels.Event, target: DeliveryTarget) -> None:
            await events_worker.effect(c, event, target)
            out.set()
            await asyncio.sleep(delay[0])

        async def one_event() -> int:
            return int(
                await conn.fetchval(
                    "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, version) "
                    "VALUES ($1, 'kx/item', $2, 'poke', 'ping', '{}', 1) RETURNING id",
                    tenant,
                    uuid.uuid4(),
                )
            )

        async def stopped_mid_delivery(grace: float) -> tuple[bool, int]:
            work = dispatcher.Dispatcher(
                pool,
                pg_dsn,
                lambda: specs,
                channels.Channels(runner=slow_effect),
                measures.Counters(),
                dispatcher.Settings(poll=0.2, tenants=frozenset({tenant}), stop_grace=grace),
            )
            out.clear()
            row = await one_event()
            work.start()
            await asyncio.wait_for(out.wait(), 10)  # the delivery ran; its transaction is open
            async with asyncio.timeout(5):
                await work.stop()
            delivered = await conn.fetchval(
                "SELECT delivered_at IS NOT NULL FROM dap.outbox WHERE id = $1", row
            )
            effects = await conn.fetchval("SELECT count(*) FROM kill_effects WHERE outbox_id = $1", row)
            return bool(delivered), int(effects)

        assert await stopped_mid_delivery(grace=10) == (True, 1)
        delay[0] = 30  # outlasts the grace: cancelled, rolled back, left for another process
        assert await stopped_mid_delivery(grace=0.3) == (False, 0)
    finally:
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
        await conn.close()
        await pool.close()
