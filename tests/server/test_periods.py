"""Accounting periods over real HTTP, gRPC and the websocket: a write of a transaction entity dated
in a closed period is 422 SVC.PERIOD.CLOSED on every verb and protocol; closing lets only the
closers post; reopening is refused for a final period and while a later one is closed (409
SVC.PERIOD.REOPEN_DENIED); every move is in the period's audit trail with who and why."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
import pytest_asyncio

from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options, token
from .protocols_clients import Grpc, Rest, Ws
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "sales/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: sales}
spec:
  title: Sales
  api: {grpc: {enabled: true, package: acme.sales.v1}}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: ['sales.*']
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: closer}
spec:
  includes: [clerk]
  permissions: [dap.periods.close, dap.periods.post_closing]
""",
    "sales/entry.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: entry, module: sales}
spec:
  characteristic: transaction
  lifecycle: true
  fields:
    - {name: posting_date, type: date, required: true}
    - {name: memo, type: string}
  state_machine:
    states: [new, checked]
    initial: new
    transitions:
      - {name: check, from: new, to: checked}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
""",
    "sales/note.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: sales}
spec:
  fields:
    - {name: date, type: date}
  expose: [{type: rest}]
""",
}


def bearer(username: str, *roles: str) -> str:
    return f"Bearer {token(sub=f'u-{username}', username=username, roles=list(roles))}"


ADMIN = bearer("root", "admin")
CLERK = bearer("carl", "clerk")
CLOSER = bearer("cleo", "closer")


class Srv:
    def __init__(self, running: Running, rest: Rest, rpc: Grpc, ws: Ws) -> None:
        self.running, self.rest, self.rpc, self.ws = running, rest, rpc, ws

    async def periods(self, method: str, path: str, who: str, body: Any = None) -> tuple[int, Any]:
        url = f"{self.running.api}/default/api/_periods{path}"
        async with self.running.http.request(method, url, json=body, headers={"Authorization": who}) as resp:
            return resp.status, await resp.json()


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("period-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Srv]:
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), load(SPEC))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            assert rpc.pool is not None
            running = Running(server, http)
            yield Srv(running, Rest(running), Grpc(ch, rpc.pool), Ws(running))
    finally:
        await server.stop()


async def _period(srv: Srv, name: str, starts: str, ends: str, **extra: Any) -> dict[str, Any]:
    status, answer = await srv.periods(
        "POST", "", ADMIN, {"name": name, "starts": starts, "ends": ends, **extra}
    )
    assert status == 201, answer
    return dict(answer["data"])


async def _move(
    srv: Srv, period: dict[str, Any], verb: str, who: str = ADMIN, **body: Any
) -> tuple[int, Any]:
    return await srv.periods("POST", f"/{period['id']}/{verb}", who, body)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def closed(srv: Srv) -> dict[str, Any]:
    """January 2025 with a draft and a submitted entry made while open, then closed."""
    period = await _period(srv, "2025-01", "2025-01-01", "2025-01-31")
    drafts = []
    for _ in range(3):
        code, row = await srv.rest.create("entry", {"posting_date": "2025-01-15", "memo": "m"}, CLERK)
        assert code == "ok", row
        drafts.append(row)
    code, done = await srv.rest.create("entry", {"posting_date": "2025-01-20"}, CLERK, submit=True)
    assert code == "ok", done
    status, answer = await _move(srv, period, "close", reason="January is booked")
    assert status == 200 and answer["data"]["state"] == "closed", answer
    return {"period": period, "drafts": drafts, "submitted": done}


CLIENTS = ["rest", "rpc", "ws"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_create_dated_in_a_closed_period_is_refused(
    srv: Srv, closed: dict[str, Any], client: str
) -> None:
    c = getattr(srv, client)
    code, _ = await c.create("entry", {"posting_date": "2025-01-10"}, ADMIN)  # admin included
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.create("entry", {"posting_date": "2025-02-10"}, CLERK)  # no period: open
    assert code == "ok"


@pytest.mark.parametrize("client", CLIENTS)
async def test_update_delete_and_moves_of_a_closed_period_are_refused(
    srv: Srv, closed: dict[str, Any], client: str
) -> None:
    c = getattr(srv, client)
    draft = closed["drafts"][CLIENTS.index(client)]
    code, _ = await c.update("entry", draft["id"], {"memo": "changed"}, CLERK)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.update("entry", draft["id"], {"posting_date": "2025-03-01"}, CLERK)  # moving it out
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.act("entry", draft["id"], "submit", CLERK)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.delete("entry", draft["id"], ADMIN)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.act("entry", closed["submitted"]["id"], "cancel", ADMIN)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await c.act("entry", draft["id"], "check", CLERK)  # a custom action, a transition here
    assert code == "SVC.PERIOD.CLOSED"
    code, row = await c.find("entry", draft["id"], CLERK)
    assert code == "ok" and row["memo"] == "m" and row["posting_date"] == "2025-01-15"


async def test_moving_a_record_into_a_closed_period_is_refused(srv: Srv, closed: dict[str, Any]) -> None:
    code, row = await srv.rest.create("entry", {"posting_date": "2025-04-01"}, CLERK)
    assert code == "ok"
    code, _ = await srv.rest.update("entry", row["id"], {"posting_date": "2025-01-02"}, CLERK)
    assert code == "SVC.PERIOD.CLOSED"


async def test_the_refusal_names_the_period_and_what_to_do(srv: Srv, closed: dict[str, Any]) -> None:
    status, answer, _ = await srv.rest._call("POST", "entry", CLERK, {"posting_date": "2025-01-31"})
    assert status == 422 and answer["type"] == "urn:dap:error:SVC.PERIOD.CLOSED", answer
    assert "'2025-01' (2025-01-01 to 2025-01-31) is closed" in answer["detail"]
    assert "dap.periods.close" in answer["detail"] and "open period" in answer["detail"]
    assert answer["errors"][0]["path"] == "posting_date"


async def test_a_master_entity_is_not_judged(srv: Srv, closed: dict[str, Any]) -> None:
    status, answer, _ = await srv.rest._call("POST", "note", CLERK, {"date": "2025-01-10"})
    assert status == 201, answer


async def test_closing_lets_only_the_closers_post(srv: Srv) -> None:
    period = await _period(srv, "2025-05", "2025-05-01", "2025-05-31")
    status, answer = await _move(srv, period, "start_closing", reason="month end")
    assert status == 200 and answer["data"]["state"] == "closing", answer
    code, _ = await srv.rest.create("entry", {"posting_date": "2025-05-02"}, CLERK)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await srv.rpc.create("entry", {"posting_date": "2025-05-02"}, CLERK)
    assert code == "SVC.PERIOD.CLOSED"
    code, _ = await srv.rest.create("entry", {"posting_date": "2025-05-02"}, CLOSER)
    assert code == "ok"


async def test_managing_periods_needs_the_permission(srv: Srv) -> None:
    status, answer = await srv.periods(
        "POST", "", CLERK, {"name": "x", "starts": "2030-01-01", "ends": "2030-01-31"}
    )
    assert (
        status == 403 and answer["code"] == "SVC.AUTH.FORBIDDEN" and "dap.periods.close" in answer["detail"]
    )
    status, answer = await srv.periods("GET", "", CLERK)
    assert status == 200 and any(p["name"] == "2025-05" for p in answer["data"])


async def test_overlapping_and_invalid_periods_are_refused(srv: Srv) -> None:
    await _period(srv, "2026-q1", "2026-01-01", "2026-03-31")
    status, answer = await srv.periods(
        "POST", "", ADMIN, {"name": "2026-03", "starts": "2026-03-01", "ends": "2026-03-31"}
    )
    assert status == 422 and "overlaps period '2026-q1'" in answer["detail"], answer
    status, answer = await srv.periods(
        "POST", "", ADMIN, {"name": "bad", "starts": "2027-02-01", "ends": "2027-01-01"}
    )
    assert status == 422, answer
    status, answer = await srv.periods(
        "POST", "", ADMIN, {"name": "2026-q1", "starts": "2028-01-01", "ends": "2028-01-02"}
    )
    assert status == 409 and answer["code"] == "SVC.VALIDATE.DUPLICATE", answer


async def test_reopen_rules_and_the_trail(srv: Srv) -> None:
    # the latest periods of the module: no later one is closed but the one the test closes
    june = await _period(srv, "2031-06", "2031-06-01", "2031-06-30")
    july = await _period(srv, "2031-07", "2031-07-01", "2031-07-31")
    assert (await _move(srv, june, "close", reason="June booked"))[0] == 200
    assert (await _move(srv, july, "close", reason="July booked", who=CLOSER))[0] == 200
    status, answer = await _move(srv, june, "reopen", reason="a late invoice")
    assert status == 409 and answer["code"] == "SVC.PERIOD.REOPEN_DENIED", answer
    assert "'2031-07'" in answer["detail"] and "reopen the later periods first" in answer["detail"]
    status, answer = await _move(srv, june, "reopen", who=CLERK, reason="x")
    assert status == 403, answer
    status, answer = await _move(srv, june, "reopen")
    assert status == 422, answer  # no reason
    assert (await _move(srv, july, "reopen", reason="July fix"))[0] == 200
    status, answer = await _move(srv, june, "reopen", reason="a late invoice")
    assert status == 200 and answer["data"]["state"] == "open", answer
    code, _ = await srv.rest.create("entry", {"posting_date": "2031-06-30"}, CLERK)
    assert code == "ok"
    status, answer = await srv.periods("GET", f"/{june['id']}/_audit", ADMIN)
    assert status == 200
    trail = [
        (r["action"], r["actor"]["username"], r["changes"].get("reason", [None, None])[1])
        for r in answer["data"]
    ]
    assert trail == [
        ("reopen", "root", "a late invoice"),
        ("close", "root", "June booked"),
        ("create", "root", None),
    ]


async def test_a_final_period_is_never_reopened(srv: Srv) -> None:
    year = await _period(srv, "2020", "2020-01-01", "2020-12-31")
    status, answer = await _move(srv, year, "close", reason="audited", final=True)
    assert status == 200 and answer["data"]["final"] is True
    status, answer = await _move(srv, year, "reopen", reason="please")
    assert status == 409 and answer["code"] == "SVC.PERIOD.REOPEN_DENIED" and "final" in answer["detail"]
    code, _ = await srv.rest.create("entry", {"posting_date": "2020-06-01"}, ADMIN)
    assert code == "SVC.PERIOD.CLOSED"


async def test_the_openapi_document_lists_the_period_routes(srv: Srv) -> None:
    async with srv.running.http.get(f"{srv.running.api}/default/api/openapi.json") as resp:
        doc = await resp.json()
    for path in ("/api/_periods", "/api/_periods/{id}/close", "/api/_periods/{id}/reopen"):
        assert path in doc["paths"], path
    assert doc["components"]["schemas"]["Period"]["properties"]["state"]["enum"] == [
        "open",
        "closing",
        "closed",
    ]
