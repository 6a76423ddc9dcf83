"""The dispatcher vacuums the outbox it marks (issue 27): every row marked delivered leaves dead
entries in the partial indexes of undelivered rows, which a claim can walk every round until a
vacuum removes them (autovacuum comes at most once a minute). A running dispatcher that marked
``vacuum_after`` rows vacuums ``dap.outbox`` in the background, on a connection of its own, and
never more often than its share allows; with ``vacuum_after = 0`` it never does. The claim's
cost with and without is measured in docs/performance.md (it depends on the plan Postgres
picks, which a test database with a few rows does not reproduce)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest

from dap.server.events import channels, dispatcher, measures

from .conftest import dispatcher_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

PAYLOAD = json.dumps({"record": {"code": "C0000001", "title": "an item", "price": "12.50", "qty": 3}})


async def emit(conn: asyncpg.Connection, tenant: uuid.UUID, n: int) -> None:
    """``n`` undeclared events (settled at once: no deliveries), each of its own record."""
    await conn.execute(
        "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, version) "
        "SELECT $1, 'kx/thing', gen_random_uuid(), 'create', 'created', $2::jsonb, 1 "
        "FROM generate_series(1, $3)",
        tenant,
        PAYLOAD,
        n,
    )


async def deliver_in_rounds(dsn: str, work: dispatcher.Dispatcher, tenant: uuid.UUID, rounds: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(rounds):
            await emit(conn, tenant, 60)
            work.wake()
            for _ in range(200):
                left = await conn.fetchval(
                    "SELECT count(*) FROM dap.outbox WHERE tenant_id = $1 AND delivered_at IS NULL", tenant
                )
                if not left:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the dispatcher did not deliver a round of 60 events")
    finally:
        await conn.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_vacuum_is_due_after_enough_rows_once_the_last_ones_pause_is_over() -> None:
    settings = dispatcher.Settings(vacuum_after=100)
    assert not dispatcher.vacuum_due(settings, 99, 10.0, 0.0, False)
    assert dispatcher.vacuum_due(settings, 100, 10.0, 0.0, False)
    assert not dispatcher.vacuum_due(settings, 100, 10.0, 10.5, False)  # the last one's pause
    assert not dispatcher.vacuum_due(settings, 500, 10.0, 0.0, True)  # one is running
    assert not dispatcher.vacuum_due(dispatcher.Settings(vacuum_after=0), 10**6, 10.0, 0.0, False)


async def vacuumed_at(dsn: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(
            "SELECT last_vacuum FROM pg_stat_user_tables WHERE relid = 'dap.outbox'::regclass"
        )
    finally:
        await conn.close()


async def test_a_running_dispatcher_vacuums_the_outbox_after_enough_rows(
    logged_pool: Any, pg_dsn: str
) -> None:
    pool, logs = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, vacuum_after=300, vacuum_share=0.5)
    work.start()
    try:
        await deliver_in_rounds(pg_dsn, work, tenant, 20)  # 1,200 rows marked delivered
        for _ in range(200):  # the last vacuum begun ends
            if work._vacuuming is not None and work._vacuuming.done():
                break
            await asyncio.sleep(0.05)
        ended = await vacuumed_at(pg_dsn)
    finally:
        await work.stop()
    assert work._vacuuming is None  # stopped with the dispatcher
    # at least one, at most one per 300 rows; less when the share's pause held one back
    assert 1 <= work.vacuums <= 1200 // 300
    assert ended is not None
    assert not [q for log in logs for q in log if q == dispatcher.VACUUM]  # never on the pool
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT now() - $1::timestamptz < interval '60 seconds'", ended)
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
    finally:
        await conn.close()


async def test_a_dispatcher_told_not_to_never_vacuums(logged_pool: Any, pg_dsn: str) -> None:
    pool, _ = logged_pool
    tenant = uuid.uuid4()
    work = dispatcher_for(pool, pg_dsn, tenant, vacuum_after=0, vacuum_share=0.5)
    work.start()
    try:
        await deliver_in_rounds(pg_dsn, work, tenant, 10)
        assert work._vacuuming is None
    finally:
        await work.stop()
    assert work.vacuums == 0


async def test_a_vacuum_that_fails_is_logged_and_paused_like_one_that_ran(
    logged_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool, _ = logged_pool
    work = dispatcher.Dispatcher(
        pool,
        "postgresql://nobody@127.0.0.1:1/none",  # nothing listens there
        dict,
        channels.Channels(),
        measures.Counters(),
        dispatcher.Settings(vacuum_after=1, vacuum_share=0.5),
    )
    await work._vacuum()
    assert work.vacuums == 0
    assert "VACUUM dap.outbox failed" in caplog.text
    assert work._vacuum_next > 0
