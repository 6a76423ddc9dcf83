"""The archive: documents of closed periods older than ``after`` leave the hot table, stay readable
through ``/_archive``, and cannot be deleted before their retention ends or under a legal hold --
409 SVC.ARCHIVE.LOCKED_FOR_DELETION for everyone, admin included, on REST, gRPC and the websocket."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
import pytest_asyncio

from dap import config
from dap.server import state
from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options, token
from .protocols_clients import Grpc, Rest, Ws
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

LOCKED = "SVC.ARCHIVE.LOCKED_FOR_DELETION"
ENTITY = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: %s, module: sales}
spec:
  characteristic: transaction
  lifecycle: true
  fields:
    - {name: posting_date, type: date, required: true}
    - {name: memo, type: string}
    - name: lines
      type: child
      child:
        storage: table
        fields:
          - {name: note, type: string}
  archive: {after: 30d, retain: %s}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
"""
SPEC = {
    "sales/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: sales}
spec:
  title: Books
  api: {grpc: {enabled: true, package: acme.sales.v1}}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: ['sales.*']
""",
    "sales/entry.yaml": ENTITY % ("entry", "3650d"),
    "sales/slip.yaml": ENTITY % ("slip", "0s"),
}
ADMIN = f"Bearer {token(sub='u-root', username='root', roles=['admin'])}"
CLERK = f"Bearer {token(sub='u-carl', username='carl', roles=['clerk'])}"


class Srv:
    def __init__(self, running: Running, rest: Rest, rpc: Grpc, ws: Ws) -> None:
        self.running, self.rest, self.rpc, self.ws = running, rest, rpc, ws

    async def call(self, method: str, path: str, body: Any = None, who: str = ADMIN) -> tuple[int, Any]:
        url = f"{self.running.api}/default/api/{path}"
        async with self.running.http.request(method, url, json=body, headers={"Authorization": who}) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("archive-handlers"))
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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def archived(srv: Srv) -> dict[str, Any]:
    """Three submitted entries and a draft of a closed March 2020, one submitted in an open April
    2020, and a submitted slip of March 2020; then the archive run."""
    made: dict[str, Any] = {"entry": [], "slip": []}
    for day in ("2020-03-02", "2020-03-03", "2020-03-04"):
        body = {"posting_date": day, "memo": "m", "lines": [{"note": f"line of {day}"}]}
        code, row = await srv.rest.create("entry", body, ADMIN, submit=True)
        assert code == "ok", row
        made["entry"].append(row)
    code, made["draft"] = await srv.rest.create("entry", {"posting_date": "2020-03-05"}, ADMIN)
    code, made["april"] = await srv.rest.create("entry", {"posting_date": "2020-04-05"}, ADMIN, submit=True)
    code, slip = await srv.rest.create("slip", {"posting_date": "2020-03-09"}, ADMIN, submit=True)
    made["slip"].append(slip)
    for name, starts, ends in (
        ("2020-03", "2020-03-01", "2020-03-31"),
        ("2020-04", "2020-04-01", "2020-04-30"),
    ):
        status, answer = await srv.call("POST", "_periods", {"name": name, "starts": starts, "ends": ends})
        assert status == 201, answer
        if name == "2020-03":
            status, _ = await srv.call("POST", f"_periods/{answer['data']['id']}/close", {"reason": "booked"})
            assert status == 200
    status, answer = await srv.call("POST", "_archive/run")
    assert status == 200, answer
    made["moved"] = answer["data"]
    return made


async def test_the_run_moves_closed_submitted_documents_only(srv: Srv, archived: dict[str, Any]) -> None:
    assert archived["moved"] == {"sales/entry": 3, "sales/slip": 1}
    code, rows = await srv.rest.list("entry", "", ADMIN)
    assert code == "ok"
    left = {r["id"] for r in rows}
    assert left == {archived["draft"]["id"], archived["april"]["id"]}  # a draft and an open month stay
    async with srv.running.server.app[state.POOL].acquire() as conn:
        kids = await conn.fetchval("SELECT count(*) FROM sales__entry__lines")
    assert kids == 0  # the archived entries' lines left with them


async def test_an_archived_record_is_read_through_the_archive(srv: Srv, archived: dict[str, Any]) -> None:
    one = archived["entry"][0]
    status, answer = await srv.call("GET", f"sales/entry/{one['id']}")
    assert status == 404
    status, answer = await srv.call("GET", f"_archive/sales/entry/{one['id']}", who=CLERK)
    assert status == 200, answer
    data = answer["data"]
    assert (data["posting_date"], data["docstatus"], data["lines"][0]["note"]) == (
        "2020-03-02",
        "submitted",
        "line of 2020-03-02",
    )
    assert data["_archive"]["legal_hold"] is False and data["_archive"]["retain_until"] > "2029"
    status, answer = await srv.call("GET", "_archive/sales/entry?limit=2", who=CLERK)
    assert status == 200 and len(answer["data"]) == 2
    async with srv.running.server.app[state.POOL].acquire() as conn:
        actions = await conn.fetch(
            "SELECT action FROM dap.audit_log WHERE record_id = $1", uuid.UUID(one["id"])
        )
    assert "archive" in {a["action"] for a in actions}


@pytest.mark.parametrize("client", ["rest", "rpc", "ws"])
async def test_deleting_an_archived_record_before_its_retention_is_refused(
    srv: Srv, archived: dict[str, Any], client: str
) -> None:
    one = archived["entry"][["rest", "rpc", "ws"].index(client)]
    code, _ = await getattr(srv, client).delete("entry", one["id"], ADMIN)  # admin included
    assert code == LOCKED
    status, answer = await srv.call("DELETE", f"_archive/sales/entry/{one['id']}")
    assert status == 409 and answer["code"] == LOCKED and "retained until" in answer["detail"], answer


async def test_past_retention_a_delete_goes_through_unless_held(srv: Srv, archived: dict[str, Any]) -> None:
    slip = archived["slip"][0]
    status, answer = await srv.call(
        "POST", f"_archive/sales/slip/{slip['id']}/hold", {"hold": True, "reason": "audit 2020"}
    )
    assert status == 200 and answer["data"]["_archive"]["legal_hold"] is True, answer
    status, answer = await srv.call("DELETE", f"_archive/sales/slip/{slip['id']}")
    assert status == 409 and answer["code"] == LOCKED and "audit 2020" in answer["detail"], answer
    code, _ = await srv.rpc.delete("slip", slip["id"], ADMIN)
    assert code == LOCKED
    status, answer = await srv.call(
        "POST", f"_archive/sales/slip/{slip['id']}/hold", {"hold": False}, who=CLERK
    )
    assert status == 403, answer  # a hold is dap.archive.hold's
    status, answer = await srv.call("POST", f"_archive/sales/slip/{slip['id']}/hold", {"hold": False})
    assert status == 200
    status, _ = await srv.call("DELETE", f"_archive/sales/slip/{slip['id']}")
    assert status == 204
    status, _ = await srv.call("GET", f"_archive/sales/slip/{slip['id']}")
    assert status == 404


async def test_archive_needs_a_dated_transaction_document() -> None:
    broken = {**SPEC, "sales/slip.yaml": SPEC["sales/slip.yaml"].replace("  lifecycle: true\n", "")}
    with pytest.raises(config.SpecError) as caught:
        config.load_files(broken)
    assert any(p.path == "spec.archive" for p in caught.value.problems)
