"""The websocket ``/{ws}/_ws`` over a real server: token on connect, row scope and field
permissions on every message, resume after a reconnect with no gap and no repeat, a slow client
dropped (code 4008) while the server keeps serving, fan-out from another server process's writes
(through Postgres, not memory)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio

from dap.server import state
from dap.server.catalog import Catalog
from dap.server.web import sockets

from .access_spec import ACCESS
from .conftest import Running, load, running, token

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(ACCESS)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog) -> AsyncIterator[Running]:
    async with running(pg_dsn, catalog) as r:
        yield r


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def other(pg_dsn: str, catalog: Catalog, srv: Running) -> AsyncIterator[Running]:
    """A second server process's worth of server (its own pool, dispatcher and feed)."""
    async with running(pg_dsn, catalog) as r:
        yield r


async def create(srv: Running, entity: str, body: dict[str, Any]) -> dict[str, Any]:
    async with srv.http.post(f"{srv.api}/default/api/sales/{entity}", json=body, headers=srv.auth()) as resp:
        assert resp.status == 201, await resp.text()
        found: dict[str, Any] = (await resp.json())["data"]
        return found


async def connect(srv: Running, **claims: Any) -> aiohttp.ClientWebSocketResponse:
    ws = await srv.http.ws_connect(
        f"{srv.api}/default/_ws", headers={"Authorization": f"Bearer {token(**claims)}"}
    )
    welcome = await ws.receive_json(timeout=5)
    assert welcome["type"] == "welcome"
    return ws


async def subscribe(
    ws: aiohttp.ClientWebSocketResponse, sid: str, entity: str, **extra: Any
) -> dict[str, Any]:
    await ws.send_json({"type": "subscribe", "id": sid, "entity": entity, **extra})
    answer: dict[str, Any] = await ws.receive_json(timeout=5)
    return answer


async def events(
    ws: aiohttp.ClientWebSocketResponse, count: int, seconds: float = 10
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(seconds):
        while len(out) < count:
            frame = await ws.receive_json()
            if frame["type"] == "event":
                out.append(frame)
    return out


async def quiet(ws: aiohttp.ClientWebSocketResponse, seconds: float = 1.0) -> list[dict[str, Any]]:
    """The event frames that arrive within ``seconds`` (expected: none)."""
    out: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while (left := end - loop.time()) > 0:
        try:
            frame = await ws.receive_json(timeout=left)
        except TimeoutError:
            break
        if frame["type"] == "event":
            out.append(frame)
    return out


async def test_a_socket_without_a_token_is_refused(srv: Running) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await srv.http.ws_connect(f"{srv.api}/default/_ws")
    assert caught.value.status == 401


async def test_row_scope_and_field_permissions_apply_to_every_message(srv: Running, other: Running) -> None:
    clerk = await connect(srv, sub="u-al", username="al", roles=["clerk"])
    boss = await connect(srv, sub="u-bo", username="bo", roles=["manager", "auditor"])
    try:
        for ws in (clerk, boss):
            assert (await subscribe(ws, "o", "sales/order"))["type"] == "subscribed"
            assert (await subscribe(ws, "c", "sales/customer"))["type"] == "subscribed"
        # written through the other server: the fan-out crosses processes through Postgres
        await create(other, "order", {"number": "N-1", "buyer": "zed"})
        mine = await create(other, "order", {"number": "N-2", "buyer": "al"})
        customer = await create(other, "customer", {"name": "Acme", "credit": "10.00"})
        # order holds per record; two dispatchers may deliver different records either way round
        got = sorted(await events(clerk, 2), key=lambda e: e["subscription"])
        assert [(e["subscription"], e["event"]["record_id"]) for e in got] == [
            ("c", customer["id"]),
            ("o", mine["id"]),
        ]
        record = got[0]["event"]["payload"]["record"]
        assert record["name"] == "Acme" and "credit" not in record  # needs read_credit
        assert got[1]["event"]["event"] == "created"
        seen = await events(boss, 3)
        numbers = {e["event"]["payload"]["record"].get("number") for e in seen}
        assert numbers == {"N-1", "N-2", None}
        credit = next(e for e in seen if e["subscription"] == "c")["event"]["payload"]["record"]["credit"]
        assert credit == "10.00"
        assert await quiet(clerk, 0.5) == []  # nothing of zed's order ever reached al
    finally:
        await clerk.close()
        await boss.close()


async def test_a_record_subscription_and_resume_after_reconnect_leave_no_gap(srv: Running) -> None:
    target = await create(srv, "customer", {"name": "Resume"})
    ws = await connect(srv)
    await subscribe(ws, "r", "sales/customer", record=target["id"])
    async with srv.http.patch(
        f"{srv.api}/default/api/sales/customer/{target['id']}", json={"note": "1"}, headers=srv.auth()
    ) as resp:
        assert resp.status == 200
    await create(srv, "customer", {"name": "not this one"})
    first = await events(ws, 1)
    if first[0]["event"]["event"] == "created":  # delivered after the subscription began: shown
        first = await events(ws, 1)
    assert first[0]["event"]["payload"]["record"]["note"] == "1"
    last = first[0]["seq"]
    await ws.close()
    for n in range(2, 6):  # written while the client is away
        async with srv.http.patch(
            f"{srv.api}/default/api/sales/customer/{target['id']}", json={"note": str(n)}, headers=srv.auth()
        ) as resp:
            assert resp.status == 200
    ws = await connect(srv)
    try:
        answer = await subscribe(ws, "r", "sales/customer", record=target["id"], after=last)
        assert answer["type"] == "subscribed"
        async with srv.http.patch(
            f"{srv.api}/default/api/sales/customer/{target['id']}", json={"note": "6"}, headers=srv.auth()
        ) as resp:
            assert resp.status == 200
        got = await events(ws, 5)
        assert [e["event"]["payload"]["record"]["note"] for e in got] == ["2", "3", "4", "5", "6"]
        seqs = [e["seq"] for e in got]
        assert seqs == sorted(set(seqs)) and seqs[0] > last
        assert await quiet(ws, 0.5) == []  # no repeat
    finally:
        await ws.close()


async def test_a_slow_client_is_dropped_and_the_server_goes_on(
    srv: Running, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sockets, "LIMIT", 8)
    slow = await connect(srv)
    await subscribe(slow, "c", "sales/customer")
    conn = await asyncpg.connect(pg_dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        await conn.execute(  # a burst of 2,000 events in one transaction
            "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, version) "
            "SELECT $1, 'sales/customer', gen_random_uuid(), 'create', 'created', "
            "jsonb_build_object('record', jsonb_build_object('name', 'burst ' || i)), 1 "
            "FROM generate_series(1, 2000) AS i",
            tenant,
        )
    finally:
        await conn.close()
    closed = None
    async with asyncio.timeout(20):
        while closed is None:
            msg = await slow.receive()
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                closed = slow.close_code
    assert closed == sockets.SLOW
    monkeypatch.setattr(sockets, "LIMIT", 256)
    hub = srv.server.app[state.EVENTS].feed
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with asyncio.timeout(30):  # the burst is fed through before the next client comes
            while True:
                pending = await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE delivered_at IS NULL")
                if not pending and hub.position >= await conn.fetchval("SELECT max(seq) FROM dap.outbox"):
                    break
                await asyncio.sleep(0.1)
    finally:
        await conn.close()
    fine = await connect(srv)  # the server still serves
    try:
        await subscribe(fine, "c", "sales/customer")
        made = await create(srv, "customer", {"name": "after the drop"})
        async with asyncio.timeout(20):  # after what is left of the burst
            while (await events(fine, 1))[0]["event"]["record_id"] != made["id"]:
                pass
    finally:
        await fine.close()


async def test_unknown_frames_and_entities_answer_errors(srv: Running) -> None:
    ws = await connect(srv)
    try:
        assert (await subscribe(ws, "x", "sales/nothing"))["code"] == "SVC.ENTITY.NOT_FOUND"
        await ws.send_str("not json")
        assert (await ws.receive_json(timeout=5))["code"] == "SVC.WS.FRAME"
        await ws.send_json({"type": "ping"})
        assert (await ws.receive_json(timeout=5)) == {"type": "pong"}
    finally:
        await ws.close()
    _ = json


async def test_scope_user_shows_only_the_callers_own_records(srv: Running) -> None:
    ws = await connect(srv, sub="u-bob", username="bob")
    try:
        assert (await subscribe(ws, "mine", "sales/customer", scope="user"))["type"] == "subscribed"
        await create(srv, "customer", {"name": "alice's"})  # srv.auth() is alice
        async with srv.http.post(
            f"{srv.api}/default/api/sales/customer",
            json={"name": "bob's"},
            headers=srv.auth(sub="u-bob", username="bob"),
        ) as resp:
            assert resp.status == 201
        got = await events(ws, 1)
        assert got[0]["event"]["payload"]["record"]["name"] == "bob's"
        await ws.send_json({"type": "unsubscribe", "id": "mine"})
        assert (await ws.receive_json(timeout=5)) == {"type": "unsubscribed", "id": "mine"}
    finally:
        await ws.close()


async def test_a_socket_is_closed_when_its_token_expires(srv: Running) -> None:
    ws = await connect(srv, ttl=2)  # a token valid for two more seconds
    await subscribe(ws, "c", "sales/customer")
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with asyncio.timeout(10):
        msg = await ws.receive()
        while msg.type is aiohttp.WSMsgType.TEXT:  # an event or two may come first
            msg = await ws.receive()
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
    assert ws.close_code == sockets.EXPIRED
    assert loop.time() - began < 4  # at the exp, not at the next heartbeat
    assert "token expired" in str(msg.extra)
    lasting = await connect(srv)  # a fresh token connects again
    try:
        assert (await subscribe(lasting, "c", "sales/customer"))["type"] == "subscribed"
        await quiet(lasting, 2.5)  # past the first socket's exp
        assert not lasting.closed  # a token valid for ten minutes is not closed
    finally:
        await lasting.close()


@pytest.mark.parametrize(
    "after",
    [10**30, 2**63, -1, True, "5", 1.5],
    ids=["1e30", "past-bigint", "negative", "bool", "str", "float"],
)
async def test_an_after_no_seq_can_have_is_an_error_frame_and_the_socket_goes_on(
    srv: Running, after: Any
) -> None:
    ws = await connect(srv)
    try:
        answer = await subscribe(ws, "far", "sales/customer", after=after)
        assert (answer["type"], answer["id"], answer["code"]) == ("error", "far", "SVC.VALIDATE.INVALID")
        await ws.send_json({"type": "ping"})
        assert (await ws.receive_json(timeout=5)) == {"type": "pong"}
        assert (await subscribe(ws, "near", "sales/customer", after=2**63 - 1))["type"] == "subscribed"
        await ws.send_json({"type": "ping"})
        assert (await ws.receive_json(timeout=5)) == {"type": "pong"}
    finally:
        await ws.close()


@pytest.mark.parametrize("depth", [65, 100_000], ids=["past-limit", "recursion"])
async def test_a_frame_nested_too_deep_is_an_error_frame_and_the_socket_goes_on(
    srv: Running, depth: int
) -> None:
    ws = await connect(srv)
    try:
        await ws.send_str("[" * depth + "]" * depth)
        answer = await ws.receive_json(timeout=5)
        assert (answer["type"], answer["code"]) == ("error", "SVC.WS.FRAME")
        assert "deeper than 64" in answer["detail"]
        await ws.send_str('{"type": "ping", "x": ' + "[" * depth + "]" * depth + "}")
        assert (await ws.receive_json(timeout=5))["code"] == "SVC.WS.FRAME"
        await ws.send_json({"type": "ping"})
        assert (await ws.receive_json(timeout=5)) == {"type": "pong"}
    finally:
        await ws.close()


async def test_a_frame_that_fails_inside_is_an_error_frame_and_the_socket_goes_on(
    srv: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever else goes wrong while answering one frame (here: the feed's read fails)."""

    async def broken(*_args: Any, **_kw: Any) -> Any:
        raise RuntimeError("the feed broke")

    ws = await connect(srv)
    try:
        monkeypatch.setattr(sockets.feed, "since", broken)
        assert (await subscribe(ws, "s", "sales/customer", after=0))["type"] == "subscribed"
        answer = await ws.receive_json(timeout=5)
        assert (answer["type"], answer["id"], answer["code"]) == ("error", "s", "SVC.SERVER.INTERNAL")
        await ws.send_json({"type": "ping"})
        assert (await ws.receive_json(timeout=5)) == {"type": "pong"}
    finally:
        await ws.close()
