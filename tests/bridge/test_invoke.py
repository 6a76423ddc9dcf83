"""Sidecar invoke and scope transactions against a real app process and real Postgres."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from dap.server.events import builtin

from .conftest import Bridged

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def item(srv: Bridged, stock: int = 10, ws: str = "default") -> dict[str, Any]:
    status, answer = await srv.call(
        "POST", "item", {"sku": f"s-{uuid.uuid4().hex[:6]}", "stock": stock}, ws=ws
    )
    assert status == 201, answer
    return answer["data"]  # type: ignore[no-any-return]


async def order(srv: Bridged, it: dict[str, Any], qty: int = 1, ws: str = "default") -> dict[str, Any]:
    status, answer = await srv.call("POST", "order", {"item": it["id"], "qty": qty}, ws=ws)
    assert status == 201, answer
    return answer["data"]  # type: ignore[no-any-return]


async def run(srv: Bridged, o: dict[str, Any], ws: str = "default", **params: Any) -> tuple[int, Any]:
    return await srv.call("POST", f"order/{o['id']}/run", params, ws=ws)


def dec(it: dict[str, Any], amount: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "primitive": "entity",
        "op": "decrement",
        "body": {"named": "store/item", "key": it["id"], "field": "stock", "amount": amount},
        **extra,
    }


async def stock(srv: Bridged, it: dict[str, Any]) -> int:
    status, answer = await srv.call("GET", f"item/{it['id']}")
    assert status == 200, answer
    return int(answer["data"]["stock"])


async def outbox(dsn: str, record_id: str) -> list[str]:
    """The events the invokes emitted for a record (the standard actions' built-ins left out)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT event FROM dap.outbox WHERE record_id = $1 AND NOT event = ANY($2::text[]) ORDER BY id",
            uuid.UUID(record_id),
            list(builtin.NAMES.values()),
        )
    finally:
        await conn.close()
    return [r["event"] for r in rows]


async def test_reserve_decrements_in_scope_moves_the_state_and_emits(srv: Bridged, pg_dsn: str) -> None:
    it = await item(srv, stock=5)
    o = await order(srv, it, qty=2)
    status, answer = await srv.call("POST", f"order/{o['id']}/reserve")
    assert status == 200, answer
    assert answer["result"] == {"stock": 3}
    assert answer["data"]["state"] == "reserved" and answer["data"]["version"] == o["version"] + 1
    assert answer["transition"] == {"from": "new", "to": "reserved"}
    assert await stock(srv, it) == 3
    assert await outbox(pg_dsn, o["id"]) == ["order.reserved"]
    # reserved has no way back to reserved: a second reserve's new_state is a same-state no-op
    status, answer = await srv.call("POST", f"order/{o['id']}/reserve")
    assert status == 200 and await stock(srv, it) == 1


async def test_a_decrement_below_zero_fails_and_the_handler_failure_rolls_back(srv: Bridged) -> None:
    it = await item(srv, stock=1)
    o = await order(srv, it, qty=5)
    status, answer = await srv.call("POST", f"order/{o['id']}/reserve")
    assert status == 500 and answer["code"] == "SVC.SIDECAR.HANDLER_FAILED", answer
    assert "409" in answer["detail"]
    assert await stock(srv, it) == 1
    status, answer = await srv.call("GET", f"order/{o['id']}")
    assert answer["data"]["state"] == "new" and answer["data"]["version"] == o["version"]


@pytest.mark.parametrize("fail", ["error", "bad", "sleep"])
async def test_every_write_of_a_failed_invoke_is_rolled_back(srv: Bridged, pg_dsn: str, fail: str) -> None:
    it = await item(srv, stock=10)
    o = await order(srv, it)
    note = {
        "primitive": "entity",
        "op": "update",
        "body": {"named": "store/item", "key": it["id"], "fields": {"note": "x"}},
    }
    status, answer = await run(
        srv, o, steps=[dec(it, 3, strict=True), note], fail=fail, sleep=4, events=[{"name": "never"}]
    )
    expected = {
        "error": (500, "SVC.SIDECAR.HANDLER_FAILED"),
        "bad": (500, "SVC.SIDECAR.BAD_REPLY"),
        "sleep": (504, "SVC.SIDECAR.TIMEOUT"),
    }
    assert (status, answer["code"]) == expected[fail], answer
    assert await stock(srv, it) == 10
    status, got = await srv.call("GET", f"item/{it['id']}")
    assert got["data"]["note"] is None and got["data"]["version"] == it["version"]
    assert await outbox(pg_dsn, o["id"]) == []


async def test_a_successful_invoke_commits_every_scoped_write(srv: Bridged, pg_dsn: str) -> None:
    it = await item(srv, stock=10)
    o = await order(srv, it)
    steps = [
        dec(it, 2),
        dec(it, 3),
        {
            "primitive": "entity",
            "op": "increment",
            "body": {"named": "store/item", "key": it["id"], "field": "stock", "amount": 1},
        },
    ]
    status, answer = await run(
        srv, o, steps=steps, new_state="reserved", events=[{"name": "a.b", "payload": {"n": 1}}]
    )
    assert status == 200, answer
    values = [r["answer"]["value"] for r in answer["result"]["results"]]
    assert values == [8, 5, 6]
    assert await stock(srv, it) == 6
    status, got = await srv.call("GET", f"item/{it['id']}")
    assert got["data"]["version"] == it["version"] + 3  # version + 1 per statement
    assert answer["data"]["state"] == "reserved"
    assert await outbox(pg_dsn, o["id"]) == ["a.b"]


async def test_a_new_state_no_transition_leads_to_is_a_409_and_nothing_commits(srv: Bridged) -> None:
    it = await item(srv, stock=10)
    o = await order(srv, it)
    status, answer = await run(srv, o, steps=[dec(it, 1)], new_state="shipped")
    assert status == 409 and answer["code"] == "SVC.STATE.TRANSITION_NOT_ALLOWED", answer
    assert await stock(srv, it) == 10
    status, answer = await run(srv, o, new_state="nonsense")
    assert status == 409, answer


async def test_a_transition_action_refuses_another_new_state(srv: Bridged) -> None:
    it = await item(srv)
    o = await order(srv, it)
    await run(srv, o, new_state="reserved")
    status, answer = await srv.call("POST", f"order/{o['id']}/ship", {"new_state": "new"})
    assert status == 500 and answer["code"] == "SVC.SIDECAR.BAD_REPLY", answer
    status, answer = await srv.call("POST", f"order/{o['id']}/ship", {})
    assert status == 200 and answer["data"]["state"] == "shipped", answer


async def test_an_unscoped_call_commits_by_itself_even_when_the_invoke_fails(srv: Bridged) -> None:
    it = await item(srv, stock=10)
    o = await order(srv, it)
    status, answer = await run(srv, o, steps=[dec(it, 4, joined=False), dec(it, 1)], fail="error")
    assert status == 500, answer
    assert await stock(srv, it) == 6  # the unscoped 4 stayed, the scoped 1 was rolled back


async def test_a_replayed_scope_is_refused_and_commits_nothing(srv: Bridged) -> None:
    it = await item(srv, stock=10)
    o = await order(srv, it)
    status, answer = await run(srv, o)
    assert status == 200
    ids = (await srv.seen())[-1]
    body = dec(it, 1)["body"]
    for headers in (
        ids,
        {"X-Svc-Scope-Id": ids["X-Svc-Scope-Id"]},
        {"X-Svc-Invoke-Id": ids["X-Svc-Invoke-Id"]},
    ):
        status, answer = await srv.ctx("entity", "decrement", body, **headers)
        assert status == 403 and answer["code"] == "SVC.CTX.SCOPE_REFUSED", answer
    status, answer = await srv.ctx("entity", "decrement", body)
    assert status == 401 and answer["code"] == "SVC.CTX.SCOPE_MISSING", answer
    assert await stock(srv, it) == 10


async def test_a_foreign_or_guessed_scope_is_refused_during_a_live_invoke(srv: Bridged) -> None:
    it = await item(srv, stock=10)
    a, b = await order(srv, it), await order(srv, it)
    first = asyncio.create_task(run(srv, a, fail="sleep", sleep=1.2))
    second = asyncio.create_task(run(srv, b, fail="sleep", sleep=1.2))
    for _ in range(50):
        seen = await srv.seen()
        if len(seen) >= 2 and all(s.get("X-Svc-Scope-Id") for s in seen[-2:]):
            break
        await asyncio.sleep(0.05)
    x, y = seen[-2], seen[-1]
    body = dec(it, 1)["body"]
    mixed = {"X-Svc-Scope-Id": x["X-Svc-Scope-Id"], "X-Svc-Invoke-Id": y["X-Svc-Invoke-Id"]}
    status, answer = await srv.ctx("entity", "decrement", body, **mixed)
    assert status == 403, answer
    for guess in ("x", x["X-Svc-Scope-Id"][:-1] + "A", uuid.uuid4().hex):
        status, answer = await srv.ctx("entity", "decrement", body, **{"X-Svc-Scope-Id": guess})
        assert status == 403, answer
    assert (await first)[0] == 200 and (await second)[0] == 200
    assert await stock(srv, it) == 10


async def test_a_scope_never_reaches_another_workspace(srv: Bridged) -> None:
    await srv.register("acme")
    theirs = await item(srv, stock=10, ws="acme")
    mine = await item(srv, stock=10)
    o = await order(srv, mine)
    get = {"primitive": "entity", "op": "get", "body": {"named": "store/item", "key": theirs["id"]}}
    query = {
        "primitive": "db",
        "op": "query",
        "body": {"named": "store/item", "filter": {"id": theirs["id"]}},
    }
    status, answer = await run(
        srv,
        o,
        steps=[
            dec(theirs, 1),
            get,
            query,
            {"primitive": "db", "op": "query", "body": {"named": "store/item", "filter": {"id": mine["id"]}}},
        ],
    )
    assert status == 200, answer
    results = answer["result"]["results"]
    assert [r["status"] for r in results] == [404, 404, 200, 200]
    assert results[2]["answer"]["data"] == []
    assert [r["id"] for r in results[3]["answer"]["data"]] == [mine["id"]]
    status, got = await srv.call("GET", f"item/{theirs['id']}", ws="acme")
    assert got["data"]["stock"] == 10


async def test_no_endpoint_is_the_501_naming_the_option(pg_dsn: str) -> None:
    from dap.server.web import app as web_app
    from tests.server.conftest import serve_options

    from .conftest import catalog

    server = await web_app.create_server(serve_options(pg_dsn), catalog())
    await server.start()
    try:
        import aiohttp

        from tests.server.conftest import token

        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {token()}"}
            async with http.post(
                f"{server.urls['api']}/default/api/store/item", json={"sku": "a"}, headers=headers
            ) as r:
                it = (await r.json())["data"]
            async with http.post(
                f"{server.urls['api']}/default/api/store/order",
                json={"item": it["id"], "qty": 1},
                headers=headers,
            ) as r:
                o = (await r.json())["data"]
            async with http.post(
                f"{server.urls['api']}/default/api/store/order/{o['id']}/reserve", headers=headers
            ) as r:
                answer = await r.json()
                assert r.status == 501 and "--sidecar-endpoint" in answer["detail"], answer
    finally:
        await server.stop()
