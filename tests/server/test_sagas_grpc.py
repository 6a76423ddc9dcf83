"""A person's operations on a parked saga over gRPC (``dap.sagas.v1.SagaService``): the inbox, one
saga with its timeline, retry / skip / resolve -- the operation REST and the websocket run, its
``SVC.SAGA.*`` codes as gRPC statuses with the code in the ``ErrorInfo``, audited like REST's.

Real Postgres, a real gRPC server beside the HTTP one, native steps registered through a real
installed distribution (entry points); a compensation that fails parks the saga as
``compensation_failed``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from dap.server.rpc import sagas_schema, status
from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options, token
from .documents_spec import JSON

pytestmark = pytest.mark.asyncio(loop_scope="module")

HANDLERS = """
async def stamp(ctx):
    await ctx.conn.execute("INSERT INTO public.grpc_saga_stamps (key) VALUES ($1)", ctx.idempotency_key)
    return {"key": ctx.idempotency_key}


async def unstamp(ctx):
    raise RuntimeError("the stamp office is closed")


async def check(ctx):
    raise RuntimeError("the check refused it")
"""

SPEC = {
    "desk/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: desk}\nspec: {title: Desk}\n",
    "desk/ops.yaml": """
apiVersion: dap.io/v1
kind: Service
metadata: {name: ops, module: desk}
spec:
  expose: [{type: rest}]
  actions:
    - name: file
      call: async
      track: true
      impl:
        type: saga
        steps:
          - {name: stamp, native: grpc-saga-stamp, compensation: {native: grpc-saga-unstamp}, retries: 0}
          - {name: check, native: grpc-saga-check, compensation: none, retries: 0}
""",
}
ADMIN = f"Bearer {token()}"
STRANGER = f"Bearer {token(sub='u-2', username='bob', roles=['clerk'])}"


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root: Path = tmp_path_factory.mktemp("grpc-saga-handlers")
    (root / "grpc_saga_handlers.py").write_text(HANDLERS)
    info = root / "grpc_saga_handlers-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: grpc-saga-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dap.actions]\n"
        "grpc-saga-stamp = grpc_saga_handlers:stamp\n"
        "grpc-saga-unstamp = grpc_saga_handlers:unstamp\n"
        "grpc-saga-check = grpc_saga_handlers:check\n"
    )
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@dataclass
class Srv:
    running: Running
    channel: grpc.aio.Channel
    pool: DescriptorPool

    async def call(self, method: str, who: str | None, **fields: Any) -> tuple[str, dict[str, Any]]:
        """``method`` of the saga service: ``("ok", answer)`` or ``(SVC code, {"grpc": code})``."""
        m = self.pool.FindServiceByName(sagas_schema.SERVICE).methods_by_name[method]
        request = message_factory.GetMessageClass(m.input_type)
        response = message_factory.GetMessageClass(m.output_type)
        stub = self.channel.unary_unary(
            f"/{sagas_schema.SERVICE}/{method}",
            request_serializer=lambda r: r.SerializeToString(),
            response_deserializer=response.FromString,
        )
        md = [("dap-workspace", "default")] + ([("authorization", who)] if who else [])
        try:
            answer = await stub(json_format.ParseDict(fields, request()), metadata=md)
        except grpc.aio.AioRpcError as exc:
            return status.reason(exc.trailing_metadata()) or "", {"grpc": exc.code().name}
        return "ok", json_format.MessageToDict(answer, preserving_proto_field_name=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Srv]:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("CREATE TABLE IF NOT EXISTS public.grpc_saga_stamps (key text PRIMARY KEY)")
    await conn.close()
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), load(SPEC))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            yield Srv(Running(server, http), ch, rpc.pool)
    finally:
        await server.stop()


async def settled(srv: Srv, saga_id: str) -> dict[str, Any]:
    """The saga once it stops moving (parked or ended), read over gRPC (404 while its job waits
    for the engine)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, saga = await srv.call("Get", ADMIN, id=saga_id)
        assert code in ("ok", "SVC.SAGA.NOT_FOUND"), saga
        if code == "ok" and saga["state"] not in ("running", "compensating"):
            return saga
        await asyncio.sleep(0.05)
    raise AssertionError("the saga never stopped")


async def parked(srv: Srv) -> dict[str, Any]:
    """A new saga whose compensation failed (the check refuses, the stamp cannot be undone)."""
    r = srv.running
    headers = {**r.auth(), **JSON}
    async with r.http.post(f"{r.api}/default/api/desk/ops/file", json={}, headers=headers) as resp:
        assert resp.status == 202, await resp.text()
        saga_id = (await resp.json())["data"]["id"]
    saga = await settled(srv, saga_id)
    assert saga["state"] == "compensation_failed", saga
    return saga


async def test_the_service_is_reflected_with_the_catalog_that_declares_a_saga(srv: Srv) -> None:
    service = srv.pool.FindServiceByName(sagas_schema.SERVICE)
    assert [m.name for m in service.methods] == ["List", "Get", "Retry", "Skip", "Resolve"]


async def test_a_parked_saga_is_in_the_inbox_and_shown_with_its_timeline(srv: Srv) -> None:
    saga = await parked(srv)
    assert saga["code"] == "SVC.SAGA.COMPENSATION_FAILED"
    assert [s["name"] for s in saga["steps"]] == ["stamp", "check"]
    assert ("stamp", "undo", "refused") in [(t["name"], t["phase"], t["outcome"]) for t in saga["timeline"]]
    code, page = await srv.call("List", ADMIN)
    assert code == "ok" and saga["id"] in [s["id"] for s in page["data"]]
    assert page["limit"] == "100"  # int64 in JSON
    code, page = await srv.call("List", ADMIN, state="completed")
    assert code == "ok" and saga["id"] not in [s["id"] for s in page.get("data", [])]
    assert await srv.call("List", ADMIN, state="lost") == (
        "SVC.VALIDATE.INVALID",
        {"grpc": "INVALID_ARGUMENT"},
    )
    assert (await srv.call("List", None))[1] == {"grpc": "UNAUTHENTICATED"}
    code, page = await srv.call("List", STRANGER)  # may not resolve it, did not ask for it
    assert code == "ok" and saga["id"] not in [s["id"] for s in page.get("data", [])]
    assert await srv.call("Get", STRANGER, id=saga["id"]) == ("SVC.SAGA.NOT_FOUND", {"grpc": "NOT_FOUND"})
    assert await srv.call("Get", ADMIN, id="nope") == ("SVC.SAGA.NOT_FOUND", {"grpc": "NOT_FOUND"})


async def test_decisions_carry_the_saga_codes_as_statuses(srv: Srv) -> None:
    saga = await parked(srv)
    assert await srv.call("Skip", ADMIN, id=saga["id"]) == (
        "SVC.SAGA.REASON_REQUIRED",
        {"grpc": "INVALID_ARGUMENT"},
    )
    assert await srv.call("Resolve", ADMIN, id=saga["id"], reason="looked") == (
        "SVC.SAGA.RESOLUTION_INVALID",
        {"grpc": "INVALID_ARGUMENT"},
    )
    assert await srv.call("Resolve", ADMIN, id=saga["id"], reason="looked", applied=False) == (
        "SVC.SAGA.RESOLUTION_INVALID",
        {"grpc": "INVALID_ARGUMENT"},
    )
    assert await srv.call("Skip", STRANGER, id=saga["id"], reason="x") == (
        "SVC.AUTH.FORBIDDEN",
        {"grpc": "PERMISSION_DENIED"},
    )
    assert (await srv.call("Retry", None, id=saga["id"]))[1] == {"grpc": "UNAUTHENTICATED"}


async def test_retry_runs_the_compensation_again_and_skip_finishes_the_saga_audited(
    srv: Srv, pg_dsn: str
) -> None:
    saga = await parked(srv)
    code, retried = await srv.call("Retry", ADMIN, id=saga["id"])
    assert code == "ok" and retried["state"] == "compensating", retried
    again = await settled(srv, saga["id"])  # the office is still closed: parked again
    assert again["state"] == "compensation_failed"
    undos = [t for t in again["timeline"] if t["phase"] == "undo" and t["outcome"] == "refused"]
    assert len(undos) == 2
    code, skipped = await srv.call("Skip", ADMIN, id=saga["id"], reason="unstamped by hand")
    assert code == "ok" and skipped["state"] == "compensating", skipped
    done = await settled(srv, saga["id"])
    assert done["state"] == "compensated", done
    assert [(t["phase"], t["outcome"], t["actor"]) for t in done["timeline"] if t["phase"] == "person"] == [
        ("person", "retry", "alice"),
        ("person", "skip", "alice"),
    ]
    assert await srv.call("Retry", ADMIN, id=saga["id"]) == ("SVC.SAGA.NOT_PARKED", {"grpc": "ABORTED"})
    conn = await asyncpg.connect(pg_dsn)
    try:
        audited = await conn.fetch(
            "SELECT action FROM dap.audit_log WHERE record_id = $1::uuid ORDER BY id", saga["id"]
        )
    finally:
        await conn.close()
    assert [r["action"] for r in audited] == ["saga.retry", "saga.skip"]
