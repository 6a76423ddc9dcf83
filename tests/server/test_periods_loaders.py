"""The seed loader and the CSV import meet the accounting periods as the API does: a row dated in a
closed period is refused with SVC.PERIOD.CLOSED (naming its line) and nothing is loaded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap.server import state
from dap.server.access import periods
from dap.server.workflows import seeding, seeds

from .conftest import Running, load, running
from .test_periods import ADMIN, SPEC

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(SPEC)) as r:
        url = f"{r.api}/default/api/_periods"
        body = {"name": "2017-01", "starts": "2017-01-01", "ends": "2017-01-31"}
        async with r.http.post(url, json=body, headers={"Authorization": ADMIN}) as resp:
            period = (await resp.json())["data"]
        async with r.http.post(
            f"{url}/{period['id']}/close", json={"reason": "booked"}, headers={"Authorization": ADMIN}
        ) as resp:
            assert resp.status == 200
        yield r


async def _count(srv: Running) -> int:
    async with srv.server.app[state.POOL].acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM sales__entry"))


async def test_a_seed_row_in_a_closed_period_loads_nothing(srv: Running) -> None:
    rows = seeds.parse_yaml(
        "entries.yaml",
        "entity: sales/entry\nrecords:\n"
        "  - {_key: feb, posting_date: 2017-02-01}\n"
        "  - {_key: jan, posting_date: 2017-01-15}\n",
    )
    app = srv.server.app
    before = await _count(srv)
    async with app[state.POOL].acquire() as conn:
        tenant = (await app[state.REGISTRY].resolve("default")).tenant_id
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, app[state.SPEC].current, tenant, rows)
    problem = caught.value.problems[0]
    assert (problem.code, problem.line, problem.field) == (periods.CLOSED, 4, "posting_date"), problem
    assert "'2017-01'" in problem.message
    assert await _count(srv) == before


async def test_an_imported_row_in_a_closed_period_imports_nothing(srv: Running) -> None:
    before = await _count(srv)
    headers = {"Authorization": ADMIN, "Content-Type": "text/csv"}
    text = "_key,posting_date,memo\nmar,2017-03-01,fine\nlate,2017-01-20,late\n"
    async with srv.http.post(
        f"{srv.api}/default/api/sales/entry/_import", data=text, headers=headers
    ) as resp:
        answer: Any = await resp.json()
        assert resp.status == 422, answer
    assert answer["code"] == "SVC.IMPORT.ROWS"
    problem = answer["problems"][0]
    assert (problem["code"], problem["line"], problem["field"]) == (periods.CLOSED, 3, "posting_date"), answer
    assert await _count(srv) == before
