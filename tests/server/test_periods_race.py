"""The close and the writes of its period are serialised in Postgres: no write dated in a period
commits after the period's close.

Two ways in: step by step (a write that passed the check holds its period, so the close waits for
it; a close under way makes a write wait and then read the period closed), and a bounded storm of
concurrent REST creates with a close in the middle of it (0 rows committed after the close)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap.server import errors, state
from dap.server.access import periods

from .conftest import Running, load, running
from .test_periods import ADMIN, CLERK, SPEC

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(SPEC)) as r:
        yield r


async def _call(srv: Running, method: str, path: str, body: Any = None, who: str = ADMIN) -> tuple[int, Any]:
    async with srv.http.request(
        method, f"{srv.api}/default/api/{path}", json=body, headers={"Authorization": who}
    ) as resp:
        return resp.status, await resp.json()


async def _period(srv: Running, name: str, starts: str, ends: str) -> dict[str, Any]:
    status, answer = await _call(srv, "POST", "_periods", {"name": name, "starts": starts, "ends": ends})
    assert status == 201, answer
    return dict(answer["data"])


async def _tenant(srv: Running) -> uuid.UUID:
    return (await srv.server.app[state.REGISTRY].resolve("default")).tenant_id


async def _count(srv: Running, starts: str, ends: str) -> int:
    async with srv.server.app[state.POOL].acquire() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM sales__entry WHERE posting_date BETWEEN $1 AND $2",
            dt.date.fromisoformat(starts),
            dt.date.fromisoformat(ends),
        )
    return int(n)


async def test_a_close_waits_for_a_write_that_passed_the_check(srv: Running) -> None:
    period = await _period(srv, "2019-03", "2019-03-01", "2019-03-31")
    tenant, day = await _tenant(srv), dt.date(2019, 3, 5)
    pool = srv.server.app[state.POOL]
    async with pool.acquire() as writer:
        tx = writer.transaction()
        await tx.start()
        await periods.guard(writer, tenant, "posting_date", day, may_post_closing=False)  # passes: open
        closing = asyncio.create_task(
            _call(srv, "POST", f"_periods/{period['id']}/close", {"reason": "race"})
        )
        await asyncio.sleep(0.5)
        assert not closing.done(), "the close did not wait for the write holding its period"
        await tx.commit()
        status, answer = await asyncio.wait_for(closing, 10)
        assert status == 200 and answer["data"]["state"] == "closed", answer
    async with pool.acquire() as late, late.transaction():
        with pytest.raises(errors.ValidationFailed) as caught:
            await periods.guard(late, tenant, "posting_date", day, may_post_closing=True)
    assert caught.value.code == periods.CLOSED


async def test_a_write_waits_for_a_close_under_way_and_then_reads_it_closed(srv: Running) -> None:
    period = await _period(srv, "2019-04", "2019-04-01", "2019-04-30")
    tenant, day = await _tenant(srv), dt.date(2019, 4, 5)
    pool = srv.server.app[state.POOL]
    async with pool.acquire() as closer:
        tx = closer.transaction()
        await tx.start()
        await closer.execute(periods.EXCLUSIVE, uuid.UUID(period["id"]))  # what the close takes first
        writing = asyncio.create_task(
            _call(srv, "POST", "sales/entry", {"posting_date": day.isoformat()}, CLERK)
        )
        await asyncio.sleep(0.5)
        assert not writing.done(), "the write did not wait for the close under way"
        await closer.execute(
            "UPDATE dap.periods SET state = 'closed' WHERE tenant_id = $1 AND id = $2",
            tenant,
            uuid.UUID(period["id"]),
        )
        await tx.commit()
    status, answer = await asyncio.wait_for(writing, 10)
    assert status == 422 and answer["code"] == periods.CLOSED, answer
    assert await _count(srv, "2019-04-01", "2019-04-30") == 0


WRITERS = 12


async def test_writers_racing_a_close_commit_nothing_after_it(srv: Running) -> None:
    period = await _period(srv, "2019-05", "2019-05-01", "2019-05-31")
    closed = asyncio.Event()
    after_close: list[int] = []  # statuses of the creates sent after the close answered
    stop = asyncio.Event()

    async def writer(i: int) -> None:
        n = 0
        while not stop.is_set():
            sent_after = closed.is_set()
            status, answer = await _call(
                srv, "POST", "sales/entry", {"posting_date": f"2019-05-{1 + (i + n) % 28:02d}"}, CLERK
            )
            assert status in (201, 422), answer
            if status == 422:
                assert answer["code"] == periods.CLOSED, answer
            if sent_after:
                after_close.append(status)
            n += 1

    tasks = [asyncio.create_task(writer(i)) for i in range(WRITERS)]
    await asyncio.sleep(0.6)  # the writers are under way
    status, answer = await _call(srv, "POST", f"_periods/{period['id']}/close", {"reason": "storm"})
    assert status == 200, answer
    at_close = await _count(srv, "2019-05-01", "2019-05-31")
    closed.set()
    await asyncio.sleep(0.6)  # the writers keep trying
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert at_close > 0, "no write committed before the close: the race did not run"
    assert after_close and set(after_close) == {422}
    assert await _count(srv, "2019-05-01", "2019-05-31") == at_close  # 0 committed after the close


async def test_a_period_is_created_only_after_the_writes_checked_before_it(srv: Running) -> None:
    """A write checked where no period was holds the workspace's periods: a period created over its
    date waits for it, so the write cannot commit after that new period's close."""
    tenant, day = await _tenant(srv), dt.date(2019, 6, 5)
    pool = srv.server.app[state.POOL]
    async with pool.acquire() as writer:
        tx = writer.transaction()
        await tx.start()
        await periods.guard(writer, tenant, "posting_date", day, may_post_closing=False)  # no period: open
        creating = asyncio.create_task(
            _call(srv, "POST", "_periods", {"name": "2019-06", "starts": "2019-06-01", "ends": "2019-06-30"})
        )
        await asyncio.sleep(0.5)
        assert not creating.done(), "the period was created while a write checked before it was in flight"
        await tx.commit()
        status, answer = await asyncio.wait_for(creating, 10)
        assert status == 201, answer
