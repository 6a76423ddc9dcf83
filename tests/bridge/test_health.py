"""An app process that dies: the invoke in flight rolls back, the bridge degrades after three
failed pings (admin /health 503, sidecar actions refused at once, everything else served), and
recovers when the app answers again. A module of its own: it kills its app process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from .conftest import AppProcess, Bridged, bridged
from .test_invoke import dec, item, order, run, stock

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, app_process: AppProcess) -> AsyncIterator[Bridged]:
    async with bridged(pg_dsn, app_process, invoke_timeout="2s") as b:
        yield b


async def admin_health(srv: Bridged) -> int:
    async with srv.http.get(f"{srv.admin}/health") as resp:
        return resp.status


async def wait_for(predicate, seconds: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def test_a_killed_app_rolls_back_degrades_and_recovers(srv: Bridged) -> None:
    assert await admin_health(srv) == 200
    it = await item(srv, stock=10)
    o = await order(srv, it)
    status, answer = await run(srv, o, steps=[dec(it, 3, strict=True)], fail="kill")
    assert status == 503 and answer["code"] == "SVC.SIDECAR.UNREACHABLE", answer
    assert await stock(srv, it) == 10

    async def degraded() -> bool:
        return srv.bridge.health.degraded

    await wait_for(degraded)
    assert await admin_health(srv) == 503
    status, answer = await run(srv, o)
    assert status == 503 and answer["code"] == "SVC.SIDECAR.DEGRADED", answer
    status, _ = await srv.call("GET", f"item/{it['id']}")  # needs no app handler: served
    assert status == 200

    srv.app_process.start()

    async def healthy() -> bool:
        return not srv.bridge.health.degraded

    await wait_for(healthy)
    assert await admin_health(srv) == 200
    status, answer = await run(srv, o, steps=[dec(it, 3, strict=True)])
    assert status == 200, answer
    assert await stock(srv, it) == 7
