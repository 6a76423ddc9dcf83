"""Events as WAL messages read by a walsender stream (``DAP_EVENTS_SOURCE=wal``, ``walstream``).

The guarantees test_events_wal proves for the SQL reader, on the stream: every event once and in
its record's order, the feed in commit order, a batch committed but never confirmed (a kill
between the two: resent, skipped by the cursor), a round that fails (its stream dropped, the batch
read again with the same ids), failed deliveries held in the outbox, two dispatchers on one slot
(one streams, the other waits), transactions without events not holding the slot, and dispatcher
processes killed with SIGKILL again and again."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import pytest_asyncio

from dap import config
from dap.server import booting
from dap.server.catalog import Catalog
from dap.server.events import dispatcher, outbox, wal, walstream

from .events_worker import EFFECTS, FILES
from .test_events_wal import Effects, deliveries_under_kills, dispatcher_of, effects, emit, in_order

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", autouse=True)
def wal_source() -> Iterator[None]:
    saved = os.environ.get(outbox.SOURCE_ENV)
    os.environ[outbox.SOURCE_ENV] = "wal"  # the stream; inherited by the worker processes too
    yield
    if saved is None:
        os.environ.pop(outbox.SOURCE_ENV, None)
    else:
        os.environ[outbox.SOURCE_ENV] = saved


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    from dap.server.storage import db

    opened = await db.open_pool(pg_dsn, 4)
    try:
        await booting.prepare_database(opened, Catalog.from_spec(config.load_files(FILES)))
        async with opened.acquire() as conn:
            await conn.execute(EFFECTS)
        yield opened
    finally:
        await opened.close()


async def until(
    work: dispatcher.Dispatcher, pool: asyncpg.Pool, ids: list[uuid.UUID], limit: float = 30
) -> None:
    """Rounds of ``work`` until every one of ``ids`` took effect (the stream hands transactions
    over as the walsender sends them, not at the round's call)."""
    end = time.monotonic() + limit
    while len(await effects(pool, ids)) < len(ids) and time.monotonic() < end:
        if not await work.drain_once() and not work._more:
            await asyncio.sleep(0.02)


async def confirmed(pool: asyncpg.Pool, slot: str | None) -> int:
    async with pool.acquire() as conn:
        found = await conn.fetchval(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot
        )
    return wal.lsn_value(found)


async def cursor_of(pool: asyncpg.Pool, slot: str | None) -> int:
    async with pool.acquire() as conn:
        return wal.lsn_value(
            await conn.fetchval("SELECT lsn::text FROM dap.event_slots WHERE slot = $1", slot)
        )


async def eventually(check: object, limit: float = 15) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if await check():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.filterwarnings("ignore")
def test_an_lsn_is_written_as_postgres_writes_it() -> None:
    for text in ("0/0", "1/2A", "16/B374D848", "FFFFFFFF/FFFFFFFF"):
        assert walstream.lsn_text(wal.lsn_value(text)) == text


async def test_every_event_is_delivered_once_in_its_records_order(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert work.streamed
    try:
        records = [uuid.uuid4() for _ in range(7)]
        ids = await emit(pool, tenant, [records[n % 7] for n in range(230)])
        await until(work, pool, ids)
        done = await effects(pool, ids)
        assert len(done) == len({r["event_id"] for r in done}) == 230
        assert in_order(done)
        async with pool.acquire() as conn:
            fed = await conn.fetch(
                "SELECT public_id, seq FROM dap.outbox WHERE public_id = ANY($1) ORDER BY seq", ids
            )
        assert [r["public_id"] for r in fed] == ids  # the feed: every event, in commit order
        cursor = await cursor_of(pool, work.slot)

        async def released() -> bool:  # the flush position sent after the commit
            return await confirmed(pool, work.slot) >= cursor

        assert await eventually(released)
    finally:
        await work.stop()


async def test_a_batch_committed_but_not_confirmed_is_not_delivered_again(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """A dispatcher killed between its commit and the flush position's update: the next stream
    (from the slot's confirmed position) sends the batch again; the cursor skips it."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert work.slot is not None
    ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(60)])
    stream = walstream.Stream(pg_dsn, work.slot, work.arrived)
    stream.start()
    try:
        end = time.monotonic() + 15
        read = 0
        while read < 60 and time.monotonic() < end:
            async with pool.acquire() as conn, conn.transaction():
                read += (await walstream.drain(work, conn, stream, work.slot, 1000))[0]  # never confirmed
            await asyncio.sleep(0.02)
        assert read == 60
    finally:
        await stream.close()
    before = await confirmed(pool, work.slot)
    assert before < await cursor_of(pool, work.slot)  # the slot behind the cursor, as after a kill
    later = await emit(pool, tenant, [uuid.uuid4() for _ in range(5)], start=60)
    try:
        await until(work, pool, [*ids, *later])
        await asyncio.sleep(0.3)
        while await work.drain_once() or work._more:  # anything resent is skipped, not delivered
            pass
    finally:
        await work.stop()
    done = await effects(pool, [*ids, *later])
    assert len(done) == len({r["event_id"] for r in done}) == 65
    async with pool.acquire() as conn:
        fed = await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE public_id = ANY($1)", [*ids, *later])
    assert fed == 65  # one feed row each


async def test_a_failed_round_drops_its_stream_and_reads_the_batch_again(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """A round that fails (here: the cursor table gone for a moment) rolls back and drops the
    stream; the next stream sends the batch again, the same events under the same ids, once."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(20)])
    try:
        async with pool.acquire() as conn:
            await conn.execute("ALTER TABLE dap.event_slots RENAME TO event_slots_away")
        failed = False
        end = time.monotonic() + 15
        while not failed and time.monotonic() < end:
            try:
                await work.drain_once()
            except asyncpg.UndefinedTableError:
                failed = True
            await asyncio.sleep(0.02)
        assert failed and work.stream is None  # dropped with what it had taken
        async with pool.acquire() as conn:
            await conn.execute("ALTER TABLE dap.event_slots_away RENAME TO event_slots")
        assert await effects(pool, ids) == []
        await until(work, pool, ids)
    finally:
        await work.stop()
    done = await effects(pool, ids)
    assert sorted(r["event_id"] for r in done) == sorted(ids)


async def test_a_failed_delivery_is_retried_from_the_outbox_holding_its_records_later_events(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    tenant, down, up = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    runner = Effects()
    runner.failing.add(down)
    work = await dispatcher_of(pool, pg_dsn, tenant, runner)
    try:
        ids = await emit(pool, tenant, [down, up, down, up])
        await until(work, pool, [ids[1], ids[3]])
        assert [r["record_id"] for r in await effects(pool, ids)] == [up, up]
        async with pool.acquire() as conn:
            waiting = await conn.fetch(
                "SELECT public_id, attempts, last_error FROM dap.outbox WHERE delivered_at IS NULL "
                "AND tenant_id = $1 ORDER BY id",
                tenant,
            )
            assert [r["public_id"] for r in waiting] == [ids[0], ids[2]]  # the failed one, then held
            assert waiting[0]["attempts"] == 1 and "receiver is down" in waiting[0]["last_error"]
            runner.failing.clear()
            await conn.execute("UPDATE dap.outbox SET next_at = now() WHERE tenant_id = $1", tenant)
        work._claim_outbox = True
        await until(work, pool, ids)
    finally:
        await work.stop()
    done = await effects(pool, ids)
    assert [r["event_id"] for r in done if r["record_id"] == down] == [ids[0], ids[2]]


async def test_two_dispatchers_on_one_slot_deliver_each_event_once(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    first = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    second = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert first.slot == second.slot
    records = [uuid.uuid4() for _ in range(5)]
    stop = asyncio.Event()

    async def rounds(work: dispatcher.Dispatcher) -> None:
        while not stop.is_set():
            await work.drain_once()
            await asyncio.sleep(0.01)

    readers = [asyncio.create_task(rounds(w)) for w in (first, second)]
    try:
        ids = await emit(pool, tenant, [records[n % 5] for n in range(200)])

        async def all_done() -> bool:
            return len(await effects(pool, ids)) >= 200

        assert await eventually(all_done, 30)
        streaming = [w for w in (first, second) if w.stream is not None and w.stream.alive]
        assert len(streaming) == 1  # the other's START_REPLICATION was refused: the slot is held
        [waiting] = [w for w in (first, second) if w not in streaming]
        assert streaming[0].watch.opens == 1 and streaming[0].watch.busy_since is None

        async def refused() -> bool:  # seen at its next try (``RETRY``), logged and counted
            return waiting.watch.busy_since is not None

        assert await eventually(refused, 10) and waiting.watch.opens == 0
    finally:
        stop.set()
        await asyncio.gather(*readers)
        await first.stop()
        await second.stop()
    done = await effects(pool, ids)
    assert len(done) == len({r["event_id"] for r in done}) == 200
    assert in_order(done)


async def test_transactions_without_events_do_not_hold_the_slot(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    try:
        [event] = await emit(pool, tenant, [uuid.uuid4()])
        await until(work, pool, [event])
        async with pool.acquire() as conn:
            for _ in range(20):
                await conn.execute(
                    "INSERT INTO kill_effects (event_id, outbox_id) VALUES (gen_random_uuid(), 0)"
                )
            before = wal.lsn_value(await conn.fetchval("SELECT pg_current_wal_flush_lsn()::text"))

        async def moved() -> bool:
            await work.drain_once()
            return await confirmed(pool, work.slot) >= before

        # the keepalives' WAL end, once all received is confirmed: sent at once, not at psycopg2's
        # 10 s status interval
        assert await eventually(moved, 3)
    finally:
        await work.stop()


async def test_events_are_delivered_once_in_order_while_dispatchers_are_killed(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """test_events_kill's test on the stream: two worker processes (``DAP_EVENTS_SOURCE=wal``
    inherited; one streams, the other waits for the slot) killed with SIGKILL again and again."""
    ids, kills = await deliveries_under_kills(pool, pg_dsn)
    done = await effects(pool, ids)
    assert kills >= 3, f"only {kills} kills happened: the test proved too little"
    assert len(done) == len({r["event_id"] for r in done}) == len(ids)  # 0 lost, 0 duplicated
    assert in_order(done)
    print(f"{kills} kills, {len(ids)} events")


async def settled_unconfirmed(pool: asyncpg.Pool, dsn: str, work: dispatcher.Dispatcher, count: int) -> None:
    """``count`` events read and settled by a stream of their own that never confirms: the state a
    dispatcher killed between its rounds' commits and their confirmations leaves."""
    assert work.slot is not None
    stream = walstream.Stream(dsn, work.slot, work.arrived)
    stream.start()
    try:
        end = time.monotonic() + 30
        read = 0
        while read < count and time.monotonic() < end:
            async with pool.acquire() as conn, conn.transaction():
                read += (await walstream.drain(work, conn, stream, work.slot, 1000))[0]
            await asyncio.sleep(0.02)
        assert read == count
    finally:
        await stream.close()


async def delivered_within(pool: asyncpg.Pool, work: dispatcher.Dispatcher, ids: list[uuid.UUID]) -> float:
    """Seconds from ``work``'s start (its own loop: wakes, poll) to every one of ``ids`` delivered;
    20 s at most (the dispatchers' poll here is 30 s: a loop that waits for it fails)."""
    began = time.monotonic()
    work.start()
    try:

        async def done() -> bool:
            return len(await effects(pool, ids)) == len(ids)

        assert await eventually(done, 20), "stalled: the stream's queue was read one batch per poll"
        return time.monotonic() - began
    finally:
        await work.stop()


async def test_a_stream_sent_again_from_behind_the_cursor_is_passed_at_once(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Issue 46's stall: after a kill, the next stream sends again what was settled but not
    confirmed, and the cursor skips it. A round that only skipped counted as no work: the loop
    waited for its poll before the next batch, and the stream, its queue not empty, never woke
    it (a backlog of 15,000 events read 100 per second in the bench)."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    await emit(pool, tenant, [uuid.uuid4() for _ in range(600)])
    await settled_unconfirmed(pool, pg_dsn, work, 600)
    assert await confirmed(pool, work.slot) < await cursor_of(pool, work.slot)
    later = await emit(pool, tenant, [uuid.uuid4() for _ in range(5)], start=600)
    assert await delivered_within(pool, work, later) < 10
    done = await effects(pool, later)
    assert len(done) == len({r["event_id"] for r in done}) == 5


async def test_a_tenants_dispatcher_passes_other_tenants_events_at_once(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The same stall from the other kind of round that settles nothing: a resource pod's
    dispatcher (its tenants only) reading a slot whose next transactions are other tenants'."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    await emit(pool, uuid.uuid4(), [uuid.uuid4() for _ in range(600)])  # another tenant's
    mine = await emit(pool, tenant, [uuid.uuid4() for _ in range(5)])
    assert await delivered_within(pool, work, mine) < 10


async def test_a_settled_round_is_confirmed_to_postgres_at_once(pool: asyncpg.Pool, pg_dsn: str) -> None:
    """The flush position goes to the walsender after each round's commit, not at psycopg2's
    status interval (10 s): what a kill leaves to send again is one round, not 10 s of events."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    work.start()
    try:
        ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(30)])

        async def done() -> bool:
            return len(await effects(pool, ids)) == 30

        assert await eventually(done, 15)
        cursor = await cursor_of(pool, work.slot)

        async def released() -> bool:
            return await confirmed(pool, work.slot) >= cursor

        assert await eventually(released, 3)
    finally:
        await work.stop()


async def test_a_burst_past_the_flow_control_after_an_idle_gap_is_delivered_at_once(
    pool: asyncpg.Pool, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The bench's other candidates for the stall: a stream idle for a while (its thread in its
    10 s wait), then a burst twelve times its queue's limit (reading held back, then resumed)."""
    monkeypatch.setattr(walstream, "LIMIT", 50)
    caplog.set_level(logging.INFO, logger="dap.server.events.walstream")
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    work.start()
    try:

        async def opened() -> bool:
            return work.watch.opens == 1

        assert await eventually(opened, 10)
        await asyncio.sleep(2)  # idle: the thread waits on its socket
        async with pool.acquire() as conn, conn.transaction():  # rounds held back: the queue fills
            await conn.execute("SELECT 1 FROM dap.event_slots WHERE slot = $1 FOR UPDATE", work.slot)
            ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(600)])

            async def full() -> bool:
                return work.stream is not None and work.stream._queued >= 50

            assert await eventually(full, 10)
            await asyncio.sleep(1.2)  # past ``HELD``: the wait is logged when it ends
        began = time.monotonic()

        async def done() -> bool:
            return len(await effects(pool, ids)) == 600

        assert await eventually(done, 20)
        assert time.monotonic() - began < 15
        assert work.watch.opens == 1  # one stream throughout: held back, never dropped
        held = [r for r in caplog.records if r.getMessage().startswith("events stream: its queue was full")]
        assert held and held[0].ctx["held_s"] > walstream.HELD  # type: ignore[attr-defined]
    finally:
        await work.stop()
    done_rows = await effects(pool, ids)
    assert len(done_rows) == len({r["event_id"] for r in done_rows}) == 600 and in_order(done_rows)
