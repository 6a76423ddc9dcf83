"""Events as logical WAL messages (``DAP_EVENTS_SOURCE=wal``, issue 46), on a real Postgres.

A write's event is one ``pg_logical_emit_message`` and no outbox row; the dispatcher reads the
slot and delivers through the outbox path's own code: every event once, a record's events in
order, across a batch committed but not advanced (a kill between the two), a batch rolled back (a
kill before its commit: read again, the same ids), failed deliveries (a retry row in the outbox
that holds its record's later events), two dispatchers on one slot, and dispatcher processes
killed with SIGKILL again and again."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import pytest_asyncio

from dap import config
from dap.config.events import DeliveryTarget
from dap.server import booting
from dap.server.catalog import Catalog
from dap.server.events import channels, dispatcher, measures, outbox, slots, wal
from dap.server.storage import db

from .events_worker import EFFECTS, FILES
from .test_events_kill import _spawn

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", autouse=True)
def wal_source() -> Iterator[None]:
    saved = os.environ.get(outbox.SOURCE_ENV)
    os.environ[outbox.SOURCE_ENV] = "wal-sql"  # the SQL reader; inherited by the worker processes too
    yield
    if saved is None:
        os.environ.pop(outbox.SOURCE_ENV, None)
    else:
        os.environ[outbox.SOURCE_ENV] = saved


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    opened = await db.open_pool(pg_dsn, 4)
    try:
        await booting.prepare_database(opened, Catalog.from_spec(config.load_files(FILES)))
        async with opened.acquire() as conn:
            await conn.execute(EFFECTS)
        yield opened
    finally:
        await opened.close()


class Effects:
    """The ``reliable_event`` runner: records each effect in the delivery's transaction; fails
    the records in ``failing``."""

    def __init__(self) -> None:
        self.failing: set[uuid.UUID] = set()

    async def __call__(self, conn: db.Connection, event: channels.Event, _target: DeliveryTarget) -> None:
        if event.record_id in self.failing:
            raise RuntimeError("the receiver is down")
        await conn.execute(
            "INSERT INTO kill_effects (event_id, record_id, outbox_id, pid, i) "
            "VALUES ($1, $2, $3, pg_backend_pid(), $4)",
            event.public_id,
            event.record_id,
            event.id,
            event.payload["i"],
        )


async def dispatcher_of(
    pool: asyncpg.Pool, dsn: str, tenant: uuid.UUID, runner: Effects
) -> dispatcher.Dispatcher:
    """A dispatcher of ``tenant`` only (its own slot, made now: it reads what is emitted after)."""
    specs = {e.key: e.spec for e in config.load_files(FILES).entities.values()}
    work = dispatcher.Dispatcher(
        pool,
        dsn,
        lambda: specs,
        channels.Channels(runner=runner),
        measures.Counters(),
        dispatcher.Settings(tenants=frozenset({tenant}), poll=30.0, batch=50),
    )
    await work._ensure_slot()
    assert work.slot is not None
    return work


async def emit(
    pool: asyncpg.Pool, tenant: uuid.UUID, records: list[uuid.UUID], start: int = 0
) -> list[uuid.UUID]:
    """One ``ping`` per entry of ``records``, in order, ten to a transaction; their public ids."""
    ids: list[uuid.UUID] = []
    async with pool.acquire() as conn:
        for at in range(0, len(records), 10):
            async with conn.transaction():
                for n, record in enumerate(records[at : at + 10], start + at):
                    ids.append(
                        await outbox.emit(
                            conn,
                            tenant=tenant,
                            entity="kx/item",
                            record_id=record,
                            action="poke",
                            event="ping",
                            payload={"i": n},
                            actor_sub="sub-1",
                            actor_username="ann",
                            request_id="req-1",
                            version=n,
                        )
                    )
    return ids


async def drain(work: dispatcher.Dispatcher) -> None:
    while await work.drain_once() or work._more:
        pass


async def effects(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return list(await conn.fetch("SELECT * FROM kill_effects WHERE event_id = ANY($1) ORDER BY n", ids))


def in_order(rows: list[asyncpg.Record]) -> bool:
    last: dict[uuid.UUID, int] = {}
    for row in rows:
        if last.get(row["record_id"], -1) > row["i"]:
            return False
        last[row["record_id"]] = row["i"]
    return True


async def test_a_write_emits_one_message_and_no_outbox_row(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant, record = uuid.uuid4(), uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    [event] = await emit(pool, tenant, [record])
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE public_id = $1", event) == 0
        read = wal.parse(await conn.fetch(wal.PEEK, work.slot, 100), "0/0")
    [body] = [b for b in read.events if b["id"] == str(event)]
    assert body["tenant"] == str(tenant) and body["record"] == str(record)
    assert (body["entity"], body["action"], body["event"]) == ("kx/item", "poke", "ping")
    assert body["payload"] == {"i": 0} and body["version"] == 0
    assert (body["sub"], body["user"], body["request"]) == ("sub-1", "ann", "req-1")
    assert wal.event_of(body, 7).created_at.tzinfo is not None


@pytest.mark.parametrize("rows", [pytest.param(1, id="one row"), pytest.param(0, id="no row")])
async def test_an_event_folded_into_a_larger_statement_is_one_message_per_row_of_its_gate(
    pool: asyncpg.Pool, pg_dsn: str, rows: int
) -> None:
    """``outbox.folded`` (a saga's end emits its event in its move's statement): one message per
    row of the gate CTE, none when the gate has none (a holder that lost the saga)."""
    tenant, record = uuid.uuid4(), uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    args = outbox.emit_args(
        tenant=tenant,
        entity="kx/item",
        record_id=record,
        action="poke",
        event="ping",
        payload={"i": 5},
        actor_sub="s",
        actor_username="u",
        request_id=None,
    )
    ctes, expression = outbox.folded(0, "gate")
    parts = ["gate AS (SELECT 1 AS one FROM generate_series(1, $12::int))", *ctes]
    async with pool.acquire() as conn:
        await conn.fetchval(f"WITH {', '.join(parts)} SELECT {expression}", *args, rows)
        assert await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE record_id = $1", record) == 0
        read = wal.parse(await conn.fetch(wal.PEEK, work.slot, 100), "0/0")
    found = [b for b in read.events if b["record"] == str(record)]
    assert [(b["event"], b["payload"]) for b in found] == [("ping", {"i": 5})] * rows


async def test_a_rewritten_payload_is_read_in_place_of_the_first(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    async with pool.acquire() as conn, conn.transaction():
        event = await outbox.emit(
            conn,
            tenant=tenant,
            entity="kx/item",
            record_id=uuid.uuid4(),
            action="poke",
            event="ping",
            payload={"i": 1},
            actor_sub="s",
            actor_username="u",
            request_id=None,
        )
        await conn.execute(outbox.rewrite_sql(), {"i": 2}, event)
    async with pool.acquire() as conn:
        read = wal.parse(await conn.fetch(wal.PEEK, work.slot, 100), "0/0")
    assert [b["payload"] for b in read.events if b["id"] == str(event)] == [{"i": 2}]


async def test_every_event_is_delivered_once_in_its_records_order(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    records = [uuid.uuid4() for _ in range(7)]
    ids = await emit(pool, tenant, [records[n % 7] for n in range(230)])
    await drain(work)
    done = await effects(pool, ids)
    assert len(done) == len({r["event_id"] for r in done}) == 230
    assert in_order(done)
    async with pool.acquire() as conn:
        fed = await conn.fetch(
            "SELECT public_id, seq FROM dap.outbox WHERE public_id = ANY($1) ORDER BY seq", ids
        )
        assert [r["public_id"] for r in fed] == ids  # the feed: every event, in commit order
        cursor = await conn.fetchval("SELECT lsn::text FROM dap.event_slots WHERE slot = $1", work.slot)
        flushed = await conn.fetchval(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", work.slot
        )
    # the slot released what was settled, and the transactions without events after it
    assert wal.lsn_value(flushed) >= wal.lsn_value(cursor)


async def test_a_batch_committed_but_not_advanced_is_not_read_again(pool: asyncpg.Pool, pg_dsn: str) -> None:
    """A dispatcher killed between its commit and the slot's advance: the cursor skips the batch,
    even one wider than the next reader's (which once stalled the slot), and the slot moves on."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert work.slot is not None
    ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(200)])
    async with pool.acquire() as conn:
        async with conn.transaction():
            read, _, _ = await wal.drain(work, conn, work.slot, 1000)
        assert read == 200  # committed; the slot not advanced, 200 events behind (batch: 50)
    later = await emit(pool, tenant, [uuid.uuid4() for _ in range(5)], start=200)
    await drain(work)
    done = await effects(pool, [*ids, *later])
    assert len(done) == len({r["event_id"] for r in done}) == 205
    async with pool.acquire() as conn:
        cursor = await conn.fetchval("SELECT lsn::text FROM dap.event_slots WHERE slot = $1", work.slot)
        flushed = await conn.fetchval(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", work.slot
        )
    assert wal.lsn_value(flushed) >= wal.lsn_value(cursor)


async def test_a_slot_with_only_transactions_without_events_moves_on(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    async with pool.acquire() as conn:
        for _ in range(20):
            await conn.execute("INSERT INTO kill_effects (event_id, outbox_id) VALUES (gen_random_uuid(), 0)")
        before = await conn.fetchval("SELECT pg_current_wal_flush_lsn()::text")
    assert await work.drain_once() == 0
    async with pool.acquire() as conn:
        flushed = await conn.fetchval(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", work.slot
        )
    assert wal.lsn_value(flushed) >= wal.lsn_value(before)  # it neither keeps nor decodes them again


async def test_a_batch_rolled_back_is_read_again_with_the_same_ids(pool: asyncpg.Pool, pg_dsn: str) -> None:
    """A dispatcher killed before its commit: nothing of the batch stands, and the next reads it
    again, the same events under the same ids, each delivered once."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert work.slot is not None
    ids = await emit(pool, tenant, [uuid.uuid4() for _ in range(20)])
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert (await wal.drain(work, conn, work.slot, 100))[0] == 20
        await tx.rollback()
    assert await effects(pool, ids) == []
    await drain(work)
    done = await effects(pool, ids)
    assert sorted(r["event_id"] for r in done) == sorted(ids)


async def test_a_failed_delivery_is_retried_from_the_outbox_holding_its_records_later_events(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    tenant, down, up = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    runner = Effects()
    runner.failing.add(down)
    work = await dispatcher_of(pool, pg_dsn, tenant, runner)
    ids = await emit(pool, tenant, [down, up, down, up])
    await drain(work)
    assert [r["record_id"] for r in await effects(pool, ids)] == [up, up]
    async with pool.acquire() as conn:
        waiting = await conn.fetch(
            "SELECT public_id, attempts, last_error FROM dap.outbox WHERE delivered_at IS NULL "
            "AND tenant_id = $1 ORDER BY id",
            tenant,
        )
        assert [r["public_id"] for r in waiting] == [ids[0], ids[2]]  # the failed one, then held
        assert waiting[0]["attempts"] == 1 and "receiver is down" in waiting[0]["last_error"]
        assert waiting[1]["attempts"] == 0
        runner.failing.clear()
        await conn.execute("UPDATE dap.outbox SET next_at = now() WHERE tenant_id = $1", tenant)
    work._claim_outbox = True
    await drain(work)
    done = await effects(pool, ids)
    assert [r["event_id"] for r in done if r["record_id"] == down] == [ids[0], ids[2]]


async def test_two_dispatchers_on_one_slot_deliver_each_event_once(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    first = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    second = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    assert first.slot == second.slot
    records = [uuid.uuid4() for _ in range(5)]

    async def writes() -> list[uuid.UUID]:
        return await emit(pool, tenant, [records[n % 5] for n in range(200)])

    async def rounds(work: dispatcher.Dispatcher, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await work.drain_once()
            await asyncio.sleep(0)

    stop = asyncio.Event()
    readers = [asyncio.create_task(rounds(w, stop)) for w in (first, second)]
    ids = await writes()
    await asyncio.sleep(0.5)
    await drain(first)
    stop.set()
    await asyncio.gather(*readers)
    done = await effects(pool, ids)
    assert len(done) == len({r["event_id"] for r in done}) == 200
    assert in_order(done)


async def deliveries_under_kills(
    pool: asyncpg.Pool, pg_dsn: str, least: int = 3
) -> tuple[list[uuid.UUID], int]:
    """Two worker processes (the event source inherited) delivering events of one tenant while
    they are killed with SIGKILL again and again: the events' ids and the kills. A worker is
    killed only while events wait; when the workers drain faster than ``least`` kills come (a quiet
    machine), another wave of events is written, so that each kill comes while events wait."""
    records = 30
    async with pool.acquire() as conn:
        name = slots.slot_name(await conn.fetchval("SELECT current_database()"))
        await slots.ensure(conn, name)  # the workers' slot (every tenant), before the writes
    tenant = uuid.uuid4()
    keys = [uuid.uuid4() for _ in range(records)]

    async def wave(size: int) -> list[uuid.UUID]:
        return await emit(
            pool, tenant, [keys[n % records] for n in range(len(ids), len(ids) + size)], len(ids)
        )

    ids: list[uuid.UUID] = []
    ids += await wave(3000)
    kills, rng, deadline = 0, random.Random(46), time.monotonic() + 180
    workers = [await _spawn(pg_dsn), await _spawn(pg_dsn)]

    async def pending() -> int:
        return len(ids) - len(await effects(pool, ids))

    try:
        while (kills < least or await pending() > 0) and time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            if kills < least and await pending() == 0:
                ids += await wave(1000)
            ready = [i for i, w in enumerate(workers) if w.ready]
            if ready and await pending() > 0 and kills < 30:
                victim = rng.choice(ready)
                await workers[victim].kill()
                kills += 1
                workers[victim] = await _spawn(pg_dsn)
    finally:
        for w in workers:
            await w.kill()
    return ids, kills


async def test_events_are_delivered_once_in_order_while_dispatchers_are_killed(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The kill -9 test of the outbox (test_events_kill), with the events as WAL messages: worker
    processes (``DAP_EVENTS_SOURCE=wal-sql`` inherited) killed with SIGKILL again and again."""
    ids, kills = await deliveries_under_kills(pool, pg_dsn)
    done = await effects(pool, ids)
    assert kills >= 3, f"only {kills} kills happened: the test proved too little"
    assert len(done) == len({r["event_id"] for r in done}) == len(ids)  # 0 lost, 0 duplicated
    assert in_order(done)
    print(f"{kills} kills, {len(ids)} events")


async def test_a_tenants_dispatcher_passes_other_tenants_events_at_once(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Issue 46's stall under the SQL reader: a resource pod's dispatcher (its tenants only) whose
    peeks return only other tenants' events settles nothing in those rounds. Its loop ended on a
    round that settled nothing and waited for its poll (30 s here) before the next peek; it now
    goes on while the peek was full."""
    tenant = uuid.uuid4()
    work = await dispatcher_of(pool, pg_dsn, tenant, Effects())
    await emit(pool, uuid.uuid4(), [uuid.uuid4() for _ in range(600)])  # another tenant's
    mine = await emit(pool, tenant, [uuid.uuid4() for _ in range(5)])
    began = time.monotonic()
    work.start()
    try:
        for _ in range(400):  # 20 s at most
            if len(await effects(pool, mine)) == len(mine):
                break
            await asyncio.sleep(0.05)
        took = time.monotonic() - began
    finally:
        await work.stop()
    done = await effects(pool, mine)
    assert len(done) == len({r["event_id"] for r in done}) == 5, (
        "stalled: a peek of others' events ended the loop"
    )
    assert took < 10, took


@pytest.mark.filterwarnings("ignore")
def test_the_refusal_says_what_to_set() -> None:
    said = str(slots.NotLogicalError("replica"))
    assert "wal_level=logical" in said and "wal_level=replica" in said and "DAP_EVENTS_SOURCE" in said


async def test_the_metrics_read_the_wal_a_slot_keeps(pool: asyncpg.Pool, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    await dispatcher_of(pool, pg_dsn, tenant, Effects())  # its slot, never read
    await emit(pool, tenant, [uuid.uuid4() for _ in range(50)])
    async with pool.acquire() as conn:
        kept, lost = await slots.retained(conn)
    assert kept > 0 and lost == 0
