"""The index guard (issue 48): a list no index serves, on a tenant above the threshold, is logged
once with its plan and counted in ``dap_list_unindexed_total``; served lists and small tenants
are left alone."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry, generate_latest

from dap.config.entities import EntitySpec
from dap.config.enums import FilterOp
from dap.server import booting
from dap.server.catalog import Catalog
from dap.server.storage import db, guarding, sql
from dap.server.storage.queries import Condition, ListQuery, SortKey

BIG, SMALL = uuid.UUID(int=1), uuid.UUID(int=2)
CATALOG = Catalog.build(
    {
        "sea/ship": EntitySpec.model_validate(
            {
                "fields": [
                    {"name": "captain", "type": "string", "index": True},
                    {"name": "berth", "type": "integer"},
                    {"name": "code", "type": "string", "unique": True},
                ]
            }
        )
    }
)
TABLE = next(t for t in CATALOG.tables if t.entity == "sea/ship")


def _query(*conditions: Condition, sort: tuple[tuple[str, bool], ...] = (("created_at", True),)) -> ListQuery:
    keys = (*(SortKey(c, d) for c, d in sort), SortKey("id", sort[-1][1]))
    return ListQuery(conditions, keys, 20, 0, False, None)


@pytest.mark.parametrize(
    ("query", "served"),
    [
        (_query(sort=(("berth", True),)), False),  # only tenant_id narrows; nothing orders by berth
        (_query(), False),  # no index on created_at here
        (_query(Condition("captain", FilterOp.EQ, ("c",)), sort=(("berth", False),)), True),  # narrowed
        (_query(Condition("captain", FilterOp.IN, ("a", "b")), sort=(("berth", False),)), True),
        (_query(sort=(("captain", True),)), True),  # ordered by the captain index, backwards
        (_query(sort=(("code", False),)), True),  # a unique index orders without the id
        (_query(Condition("berth", FilterOp.GT, (3,)), sort=(("berth", False),)), False),
        (ListQuery((), (SortKey("id", False),), 20, 0, False, None), True),  # the primary key
    ],
)
def test_served(query: ListQuery, served: bool) -> None:
    assert guarding.served(TABLE, guarding.shape_of(query)) is served


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.open_pool(pg_dsn, 2)
    try:
        await booting.prepare_database(pool, CATALOG)
        insert = (
            'INSERT INTO "sea__ship" (tenant_id, captain, berth, code) '
            "SELECT $1, $2, i, $2 || i FROM generate_series(1, $3) AS g(i)"
        )
        await pool.execute(insert, BIG, "big", 12_000)
        await pool.execute(insert, SMALL, "small", 10)
        await pool.execute('ANALYZE "sea__ship"')
        yield pool
    finally:
        await pool.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unserved_list_on_a_big_tenant_is_logged_once_and_counted(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    guard = guarding.Guard(threshold=10_000)
    caplog.set_level(logging.WARNING, logger="dap.server.storage.guarding")
    unserved = _query(sort=(("berth", True),))
    async with pool.acquire() as conn:
        for _ in range(3):
            statement = sql.select_list(TABLE, unserved, BIG, None)
            await conn.fetch(*sql.flat(statement))
            assert await guard.check(conn, TABLE, unserved, BIG, statement)
        # the same list on a small tenant, and a served list on the big one: nothing
        assert not await guard.check(
            conn, TABLE, unserved, SMALL, sql.select_list(TABLE, unserved, SMALL, None)
        )
        served = _query(Condition("captain", FilterOp.EQ, ("big",)))
        assert not await guard.check(conn, TABLE, served, BIG, sql.select_list(TABLE, served, BIG, None))
    (record,) = [r for r in caplog.records if r.name == "dap.server.storage.guarding"]
    ctx = record.ctx  # type: ignore[attr-defined]
    assert ctx["table"] == "sea__ship" and ctx["sort"] == ["-berth", "-id"]
    assert ctx["tenant_rows"] >= 10_000 and "Sort" in ctx["plan"] and "sea__ship" in ctx["plan"]
    registry = CollectorRegistry()
    registry.register(guarding.GuardCollector(guard))
    assert 'dap_list_unindexed_total{table="sea__ship"} 3.0' in generate_latest(registry).decode()
