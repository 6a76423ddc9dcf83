"""Online index builds (issue 48): an index added to a table that holds rows is built with
CREATE INDEX CONCURRENTLY after the migration, writes go on meanwhile, its progress is logged,
and a build that dies (cancelled at shutdown, its backend killed) is rebuilt by the next boot."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry, generate_latest

from dap.config.entities import EntitySpec
from dap.server import booting
from dap.server.catalog import Catalog
from dap.server.storage import building, db, schema_sync
from tests.conftest import drop_database, new_database
from tests.server.conftest import running

TENANT = uuid.UUID(int=7)
ROWS = 50_000


def _catalog(*, indexed: bool) -> Catalog:
    fields = [
        {"name": "captain", "type": "string"},
        {"name": "berth", "type": "integer", "index": indexed},
    ]
    spec = {"fields": fields, "expose": [{"type": "rest"}]}
    return Catalog.build({"sea/ship": EntitySpec.model_validate(spec)})


@pytest_asyncio.fixture(loop_scope="function")
async def pool(pg_server_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    name, dsn = await new_database(pg_server_dsn)
    pool = await db.open_pool(dsn, 4)
    try:
        await booting.prepare_database(pool, _catalog(indexed=False))
        await pool.execute(
            'INSERT INTO "sea__ship" (tenant_id, captain, berth) '
            "SELECT $1, 'c' || (i % 10), i FROM generate_series(1, $2) AS g(i)",
            TENANT,
            ROWS,
        )
        yield pool
    finally:
        await pool.close()
        await drop_database(pg_server_dsn, name)


async def _validity(pool: asyncpg.Pool, name: str) -> bool | None:
    return await pool.fetchval(  # type: ignore[no-any-return]
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1",
        name,
    )


async def _building(pool: asyncpg.Pool) -> dict[str, Any]:
    """Wait until a CREATE INDEX is under way; its pg_stat_progress_create_index row."""
    for _ in range(400):
        row = await pool.fetchrow("SELECT pid, phase FROM pg_stat_progress_create_index")
        if row is not None:
            return dict(row)
        await asyncio.sleep(0.025)
    raise AssertionError("no index build started")


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("death", ["cancelled", "killed"])
async def test_an_index_on_a_filled_table_is_built_online_and_a_dead_build_is_rebuilt(
    pool: asyncpg.Pool, death: str, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = _catalog(indexed=True)
    async with pool.acquire() as conn:
        plan = await schema_sync.sync(conn, catalog.tables, catalog.entities)
    (step,) = [s for s in plan.steps if s.kind == "create_index"]
    assert step.online and "CONCURRENTLY" in step.statements[0]
    name = step.index
    assert name is not None
    assert await _validity(pool, name) is None, "the migration commits without building it"
    async with pool.acquire() as conn:
        assert [p.index.name for p in await building.pending(conn, catalog.tables)] == [name]

    # a writer's open transaction: the build waits for it (CONCURRENTLY waits for older writers)
    writer = await pool.acquire()
    tx = writer.transaction()
    await tx.start()
    insert = 'INSERT INTO "sea__ship" (tenant_id, captain, berth) VALUES ($1, $2, $3)'
    await writer.execute(insert, TENANT, "w", 1)
    caplog.set_level(logging.INFO, logger="dap.server.storage.building")
    task = asyncio.create_task(building.build(pool, catalog.tables, every=0.05))
    progress = await _building(pool)
    # meanwhile another write goes through at once: a plain CREATE INDEX would queue it
    async with pool.acquire() as other:
        await other.execute("SET lock_timeout = '2s'")
        await other.execute(
            'INSERT INTO "sea__ship" (tenant_id, captain, berth) VALUES ($1, $2, $3)', TENANT, "x", 2
        )
        await other.execute("RESET lock_timeout")
    await asyncio.sleep(0.2)
    assert any(r.getMessage() == "index build progress" for r in caplog.records)
    registry = CollectorRegistry()
    registry.register(building.ProgressCollector())
    shown = generate_latest(registry).decode()
    assert f'dap_index_build_total{{index="{name}",phase="waiting for writers before build"}}' in shown
    for _ in range(400):  # the build's catalog entry is committed (it waits for the writer now)
        if await _validity(pool, name) is not None:
            break
        await asyncio.sleep(0.025)
    # the build dies: the server stopped (its task cancelled) or its backend killed
    if death == "cancelled":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await pool.execute("SELECT pg_terminate_backend($1)", progress["pid"])
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError)):
            await task
    await tx.rollback()
    await pool.release(writer)
    assert await _validity(pool, name) is False, "a dead concurrent build leaves an INVALID index"

    # the next boot finds it INVALID and builds it again
    caplog.clear()
    assert await building.build(pool, catalog.tables) == [name]
    assert await _validity(pool, name) is True
    assert any("INVALID; rebuilding" in r.getMessage() for r in caplog.records)
    async with pool.acquire() as conn:
        assert await building.pending(conn, catalog.tables) == []
        plan = await schema_sync.current_plan(conn, catalog.tables, catalog.entities)
    assert plan.steps == ()


@pytest.mark.asyncio(loop_scope="function")
async def test_an_index_that_gives_way_is_dropped_after_the_builds(pool: asyncpg.Pool) -> None:
    indexed = _catalog(indexed=True)
    async with pool.acquire() as conn:
        await schema_sync.sync(conn, indexed.tables, indexed.entities)
    assert await building.build(pool, indexed.tables)
    (old,) = [i.name for t in indexed.tables for i in t.indexes if i.columns == ("tenant_id", "berth")]
    plain = _catalog(indexed=False)
    async with pool.acquire() as conn:
        plan = await schema_sync.sync(conn, plain.tables, plain.entities)
    (drop,) = [s for s in plan.steps if s.kind == "drop_index"]
    assert drop.online and drop.index == old
    assert await _validity(pool, old) is True, "kept until the builds are done"
    assert await building.build(pool, plain.tables) == []
    assert await _validity(pool, old) is None
    assert await pool.fetchval("SELECT count(*) FROM dap.index_drops") == 0


@pytest.mark.asyncio(loop_scope="function")
async def test_one_process_builds_at_a_time(pool: asyncpg.Pool) -> None:
    catalog = _catalog(indexed=True)
    async with pool.acquire() as conn:
        await schema_sync.sync(conn, catalog.tables, catalog.entities)
    async with pool.acquire() as holder:
        await holder.execute("SELECT pg_advisory_lock($1)", building.LOCK_KEY)
        assert await building.build(pool, catalog.tables) == [], "another process holds the builder's lock"
        await holder.execute("SELECT pg_advisory_unlock($1)", building.LOCK_KEY)
    assert len(await building.build(pool, catalog.tables)) == 1


@pytest.mark.asyncio(loop_scope="function")
async def test_the_server_serves_while_its_index_builds(pool: asyncpg.Pool, pg_server_dsn: str) -> None:
    catalog = _catalog(indexed=True)
    dsn = pool._connect_args[0]  # type: ignore[attr-defined]  # the fixture's database
    writer = await pool.acquire()
    tx = writer.transaction()
    await tx.start()  # an open write: the concurrent build waits for it, the server must not
    rolled = False
    await writer.execute(
        'INSERT INTO "sea__ship" (tenant_id, captain, berth) VALUES ($1, $2, $3)', TENANT, "w", 1
    )
    try:
        async with running(dsn, catalog) as srv:
            await _building(pool)  # started by the server in the background
            url = f"{srv.api}/default/api/sea/ship"
            async with srv.http.post(url, json={"captain": "c", "berth": 3}, headers=srv.auth()) as resp:
                assert resp.status == 201, await resp.text()
            async with srv.http.get(f"{url}?limit=2", headers=srv.auth()) as resp:
                assert resp.status == 200, await resp.text()
            (name,) = [
                i.name for t in catalog.tables for i in t.indexes if i.columns == ("tenant_id", "berth")
            ]
            for _ in range(400):  # the build's catalog entry commits just after its progress row shows
                if await _validity(pool, name) is not None:
                    break
                await asyncio.sleep(0.025)
            assert await _validity(pool, name) is False, "still building"
            await tx.rollback()
            rolled = True
            for _ in range(400):
                if await _validity(pool, name):
                    break
                await asyncio.sleep(0.05)
            assert await _validity(pool, name) is True
    finally:
        if not rolled:
            await tx.rollback()
        await pool.release(writer)
