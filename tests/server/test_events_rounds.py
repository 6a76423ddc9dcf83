"""What the background loops send per round of writes (issue 27): the dispatcher claims again only
when its batch was full or left rows due (no empty claim after every batch), asks for the next
retry once per poll rather than after every round, and still delivers a record's events one
after another, in order, without waiting for its poll; an idle feed moves to the head named by
the ``dap_feed`` NOTIFY it heard instead of asking Postgres at each one, and asks again when its
listener was replaced (notifications in between were missed). The statements are those each
pool connection logs (asyncpg query loggers) on this module's own pool."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from dap.server.events import dispatcher, feed

from .conftest import Logs, dispatcher_for

pytestmark = pytest.mark.asyncio(loop_scope="module")


def sent(logs: Logs, since: list[int]) -> list[str]:
    return [q for log, start in zip(logs, since, strict=True) for q in log[start:]]


def marks(logs: Logs) -> list[int]:
    return [len(log) for log in logs]


def claims(statements: list[str]) -> int:
    return sum(1 for q in statements if q == dispatcher.CLAIM.strip())


def dues(statements: list[str]) -> int:
    return sum(1 for q in statements if q == dispatcher.DUE.strip())


async def emit(dsn: str, tenant: uuid.UUID, records: list[uuid.UUID]) -> list[int]:
    """One undeclared event per entry of ``records`` (settled at once: no deliveries), in order."""
    conn = await asyncpg.connect(dsn)
    try:
        return [
            int(
                await conn.fetchval(
                    "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, version) "
                    "VALUES ($1, 'kx/thing', $2, 'update', 'updated', '{}', 1) RETURNING id",
                    tenant,
                    record,
                )
            )
            for record in records
        ]
    finally:
        await conn.close()


async def seqs(dsn: str, ids: list[int]) -> list[int | None]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT id, seq FROM dap.outbox WHERE id = ANY($1::bigint[])", ids)
    finally:
        await conn.close()
    found = {r["id"]: r["seq"] for r in rows}
    return [found.get(i) for i in ids]


async def reaches(events: feed.Feed, seq: int) -> None:
    for _ in range(250):
        if events.position >= seq:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the feed stayed at {events.position}, not {seq}")


async def test_a_batch_that_leaves_nothing_due_is_not_followed_by_an_empty_claim(
    logged_pool: Any, pg_dsn: str
) -> None:
    pool, logs = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, poll=30)
    ids = await emit(pg_dsn, tenant, [uuid.uuid4() for _ in range(5)])
    since = marks(logs)
    assert await work.drain_once() == 5
    assert not work._more  # nothing else due: the loop waits now
    assert claims(sent(logs, since)) == 1
    assert all(s is not None for s in await seqs(pg_dsn, ids))
    # a record's second event is held back while its first is claimed: claimed next, at once
    record = uuid.uuid4()
    ids = await emit(pg_dsn, tenant, [record, record])
    assert await work.drain_once() == 1
    assert work._more
    assert await work.drain_once() == 1
    assert not work._more
    first, second = await seqs(pg_dsn, ids)
    assert first is not None and second is not None and first < second


async def test_a_full_batch_claims_again(logged_pool: Any, pg_dsn: str) -> None:
    pool, _ = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, poll=30)
    work.settings.batch = 3
    await emit(pg_dsn, tenant, [uuid.uuid4() for _ in range(3)])
    assert await work.drain_once() == 3
    assert work._more  # full: there may be more
    assert await work.drain_once() == 0


async def test_a_running_dispatcher_delivers_a_records_events_in_order_before_its_poll(
    logged_pool: Any, pg_dsn: str
) -> None:
    """Five events of one record, woken once: each is claimed after the one before it is
    delivered, without waiting for the (here 30 s) poll; the next retry is not asked for after
    each of those rounds."""
    pool, logs = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, poll=30)
    work.start()
    try:
        await asyncio.sleep(0.3)  # its first round, idle
        since = marks(logs)
        record = uuid.uuid4()
        ids = await emit(pg_dsn, tenant, [record] * 5)
        work.wake()
        for _ in range(100):
            if None not in await seqs(pg_dsn, ids):
                break
            await asyncio.sleep(0.05)
        delivered = await seqs(pg_dsn, ids)
        assert delivered == sorted(delivered)  # type: ignore[type-var]
        for _ in range(3):  # more rounds of writes
            await emit(pg_dsn, tenant, [uuid.uuid4()])
            work.wake()
            await asyncio.sleep(0.1)
        statements = sent(logs, since)
        assert 5 <= claims(statements) <= 5 + 3 + 1, statements
        assert dues(statements) == 0, statements  # asked once per poll, at the first round
    finally:
        await work.stop()


async def test_a_failed_delivery_asks_for_the_next_retry(logged_pool: Any, pg_dsn: str) -> None:
    pool, _ = logged_pool
    work = dispatcher_for(pool, pg_dsn, uuid.uuid4(), poll=30)
    now = asyncio.get_running_loop().time()
    work._due_checked = now
    assert not work._due_needed(now + 1)
    work._retried = True
    assert work._due_needed(now + 1)
    work._retried, work._next_due = False, now + 0.5
    assert not work._due_needed(now + 0.4) and work._due_needed(now + 0.6)
    work._next_due = None
    assert work._due_needed(now + 30)  # once per poll: another process's retries


async def test_an_idle_feed_follows_the_notified_head_and_asks_after_a_new_listener(
    logged_pool: Any, pg_dsn: str
) -> None:
    pool, logs = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, poll=30)
    events = feed.Feed(pool, pg_dsn, poll=30)
    events.start()
    try:
        await asyncio.sleep(0.3)  # started: its first HEAD read
        since = marks(logs)
        for _ in range(3):
            ids = await emit(pg_dsn, tenant, [uuid.uuid4(), uuid.uuid4()])
            await work.drain_once()
            top = max(s for s in await seqs(pg_dsn, ids) if s is not None)
            await reaches(events, top)
        assert not [q for q in sent(logs, since) if q == feed.HEAD], sent(logs, since)
        await events._listener.close()  # lost: what it would have heard is unknown
        ids = await emit(pg_dsn, tenant, [uuid.uuid4()])
        await work.drain_once()
        top = max(s for s in await seqs(pg_dsn, ids) if s is not None)
        events._wake.set()
        await reaches(events, top)
        assert [q for q in sent(logs, since) if q == feed.HEAD] == [feed.HEAD]
    finally:
        await events.stop()
