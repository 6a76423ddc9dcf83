"""Traces on gRPC and the websocket's calls: a span per call continuing the caller's trace (the
``traceparent`` metadata entry, the call frame's ``traceparent`` member), the operation under it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import grpc
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dap import tracing
from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options
from .protocols_clients import Grpc, Ws
from .protocols_harness import ADMIN, registered
from .protocols_spec import SPEC

pytestmark = pytest.mark.asyncio(loop_scope="module")
__all__ = ["registered"]  # a fixture, used by name
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    with tracing.enabled_for_tests(found):  # before the server: its gRPC interceptor and SQL logger
        yield found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def clients(
    pg_dsn: str, registered: None, exporter: InMemorySpanExporter
) -> AsyncIterator[tuple[Grpc, Ws]]:
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), load(SPEC))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            assert rpc.pool is not None
            yield Grpc(ch, rpc.pool), Ws(Running(server, http))
    finally:
        await server.stop()


def under(spans: list[object], parent_hex: str) -> object:
    (found,) = [s for s in spans if s.parent is not None and f"{s.parent.span_id:016x}" == parent_hex]  # type: ignore[attr-defined]
    return found


async def test_a_grpc_call_continues_the_callers_trace(
    clients: tuple[Grpc, Ws], exporter: InMemorySpanExporter
) -> None:
    rpc, _ws = clients
    exporter.clear()
    request = rpc.request("customer", "Create", record=rpc.record("customer", {"name": "traced-grpc"}))
    md = [*rpc.metadata(ADMIN), ("traceparent", PARENT)]
    await rpc._method("customer", "Create")(request, metadata=md)
    spans = list(exporter.get_finished_spans())
    call = under(spans, PARENT.split("-")[2])
    assert call.name.endswith("/Create") and call.attributes["rpc.system"] == "grpc"  # type: ignore[attr-defined]
    assert f"{call.context.trace_id:032x}" == PARENT.split("-")[1]  # type: ignore[attr-defined]
    (operation,) = [s for s in spans if s.name == "create sales/customer"]
    assert operation.parent.span_id == call.context.span_id  # type: ignore[attr-defined,union-attr]


async def test_a_websocket_call_continues_the_frames_trace(
    clients: tuple[Grpc, Ws], exporter: InMemorySpanExporter
) -> None:
    _rpc, ws = clients
    exporter.clear()
    code, _answer = await ws._call(
        ADMIN, entity="sales/customer", verb="create", body={"name": "traced-ws"}, traceparent=PARENT
    )
    assert code == "ok"
    spans = list(exporter.get_finished_spans())
    call = under(spans, PARENT.split("-")[2])
    assert call.name == "ws call sales/customer/create"  # type: ignore[attr-defined]
    (operation,) = [s for s in spans if s.name == "create sales/customer"]
    assert operation.parent.span_id == call.context.span_id  # type: ignore[attr-defined,union-attr]
