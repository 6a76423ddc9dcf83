"""Sidecar service actions, async jobs and the API description with a real app process attached.

``store/desk`` is a Service whose actions the app process implements (``tally`` synchronous,
``recount`` queued as a job); ``store/order/later`` is an async record action. Without a bridge
the same spec's description leaves them out (they would answer 501).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import asyncpg
import pytest

from dap.server.web import app, openapi, ui_meta
from tests.server.conftest import Running, serve_options

from .conftest import SPEC, Bridged, catalog
from .test_invoke import item, order, stock

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def desk_events(dsn: str) -> list[tuple[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT event, record_id FROM dap.outbox WHERE entity = 'store/desk' ORDER BY id"
        )
    finally:
        await conn.close()
    return [(r["event"], r["record_id"]) for r in rows]


async def until_done(srv: Bridged, location: str) -> dict[str, Any]:
    for _ in range(200):
        async with srv.http.get(f"{srv.api}{location}", headers=srv.auth()) as resp:
            assert resp.status == 200, await resp.text()
            job: dict[str, Any] = (await resp.json())["data"]
        if job["state"] in ("succeeded", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job at {location} did not finish in 10 s: {job}")


async def test_service_action_runs_in_the_app_inside_one_transaction(srv: Bridged, pg_dsn: str) -> None:
    it = await item(srv, stock=4)
    before = len(await desk_events(pg_dsn))
    status, answer = await srv.call("POST", "desk/tally", {"item": it["id"], "amount": 3})
    assert status == 200, answer
    # no record: the app is sent resource_id and resource null
    assert answer["result"] == {"stock": 7, "resource": None, "id": None}
    assert await stock(srv, it) == 7
    events = (await desk_events(pg_dsn))[before:]
    assert [e for e, _ in events] == ["desk.tallied", "desk.counted"]  # emits, then the app's
    assert all(r is None for _, r in events)


async def test_service_action_failure_rolls_back_the_apps_writes(srv: Bridged, pg_dsn: str) -> None:
    it = await item(srv, stock=4)
    before = len(await desk_events(pg_dsn))
    status, answer = await srv.call("POST", "desk/tally", {"item": it["id"], "amount": 3, "fail": "error"})
    assert status == 500 and answer["code"] == "SVC.SIDECAR.HANDLER_FAILED", answer
    status, answer = await srv.call("POST", "desk/tally", {"item": it["id"], "amount": 3, "fail": "state"})
    assert status == 500 and answer["code"] == "SVC.SIDECAR.BAD_REPLY", answer
    assert "no record to move" in answer["detail"]
    assert await stock(srv, it) == 4  # the increments joined the scope and were rolled back
    assert len(await desk_events(pg_dsn)) == before


async def test_async_service_action_runs_in_the_job_worker(srv: Bridged) -> None:
    it = await item(srv, stock=1)
    status, answer = await srv.call("POST", "desk/recount", {"item": it["id"], "amount": 5})
    assert status == 202, answer
    job = await until_done(srv, f"/default/api/store/desk/_jobs/{answer['data']['id']}")
    assert job["state"] == "succeeded", job
    assert job["result"]["result"]["stock"] == 6
    assert await stock(srv, it) == 6
    # a failing job rolls the app's write back with the job's own transaction
    status, answer = await srv.call("POST", "desk/recount", {"item": it["id"], "amount": 5, "fail": "error"})
    assert status == 202, answer
    job = await until_done(srv, f"/default/api/store/desk/_jobs/{answer['data']['id']}")
    assert job["state"] == "failed" and job["error"]["code"] == "SVC.SIDECAR.HANDLER_FAILED", job
    assert await stock(srv, it) == 6


async def test_async_record_action_runs_in_the_job_worker(srv: Bridged) -> None:
    it = await item(srv, stock=5)
    o = await order(srv, it, qty=2)
    status, answer = await srv.call("POST", f"order/{o['id']}/later")
    assert status == 202, answer
    job = await until_done(srv, f"/default/api/store/order/_jobs/{answer['data']['id']}")
    assert job["state"] == "succeeded", job
    assert job["result"]["transition"] == {"from": "new", "to": "reserved"}
    assert await stock(srv, it) == 3


async def test_described_as_runnable_when_the_bridge_is_attached(srv: Bridged) -> None:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json") as resp:
        assert resp.status == 200
        paths = (await resp.json())["paths"]
    assert "/api/store/order/{id}/reserve" in paths
    assert "/api/store/order/{id}/later" in paths
    assert "/api/store/desk/tally" in paths and "/api/store/desk/recount" in paths
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/entities/store/order") as resp:
        meta = (await resp.json())["data"]
    assert {"reserve", "run", "ship", "later", "mark_reserved"} <= set(meta["runnable"])
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/services/store/desk") as resp:
        assert resp.status == 200
        assert (await resp.json())["data"]["runnable"] == ["recount", "tally"]


async def test_left_out_without_a_bridge() -> None:
    spec = catalog()
    paths = openapi.document(spec, "default")["paths"]
    assert "/api/store/order/{id}/reserve" not in paths and "/api/store/desk/tally" not in paths
    assert "/api/store/order/{id}/mark_reserved" in paths  # a plain transition runs anyway
    assert ui_meta.entity_meta(spec, "store/order")["runnable"] == ["mark_reserved"]
    assert ui_meta.service_meta(spec, "store/desk")["runnable"] == []
    bridged = openapi.document(spec, "default", bridged=True)["paths"]
    assert "/api/store/order/{id}/reserve" in bridged and "/api/store/desk/tally" in bridged


async def test_without_a_bridge_service_sidecar_actions_are_501(pg_dsn: str) -> None:
    server = await app.create_server(serve_options(pg_dsn, spec=str(SPEC)), catalog())
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            running = Running(server, http)
            url = f"{running.api}/default/api/store/desk/tally"
            body = {"item": str(uuid.uuid4()), "amount": 1}
            async with http.post(url, json=body, headers=running.auth()) as resp:
                problem = await resp.json()
                assert resp.status == 501 and problem["code"] == "SVC.ACTION.SIDECAR_NOT_CONFIGURED"
                assert "--sidecar-endpoint" in problem["detail"]
    finally:
        await server.stop()


async def test_a_reliable_event_target_runs_in_the_app(srv: Bridged) -> None:
    status, answer = await srv.call("POST", "ticket", {"title": "t"})
    assert status == 201, answer
    ticket = answer["data"]
    for _ in range(200):
        status, answer = await srv.call("GET", f"ticket/{ticket['id']}")
        if answer["data"]["state"] == "stamped":
            break
        await asyncio.sleep(0.05)
    assert answer["data"]["state"] == "stamped", answer
    assert answer["data"]["note"] == "stamped by the app"  # the app's /ctx write joined the scope
