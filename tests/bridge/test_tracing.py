"""Traces across the bridge: the invoke sends the app process a W3C ``traceparent``, the example
app (examples/bridge/python/svc_app.py) sends it back on its ``/ctx`` calls, and those calls'
spans join the request's trace as children of the invoke's span."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dap import tracing

from .conftest import AppProcess, bridged

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_invoke_and_its_ctx_calls_are_in_the_request_trace(
    pg_dsn: str, app_process: AppProcess
) -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter):
        async with bridged(pg_dsn, app_process, invoke_timeout="5s") as srv:
            status, it = await srv.call("POST", "item", {"sku": f"t-{uuid.uuid4().hex[:6]}", "stock": 4})
            assert status == 201, it
            status, o = await srv.call("POST", "order", {"item": it["data"]["id"], "qty": 1})
            assert status == 201, o
            exporter.clear()
            status, answer = await srv.call("POST", f"order/{o['data']['id']}/reserve")
            assert status == 200, answer
    spans = exporter.get_finished_spans()
    (request,) = [s for s in spans if s.name.startswith("POST /{ws}/api/") and s.kind.name == "SERVER"]
    (invoke,) = [s for s in spans if s.name == "invoke store/order/reserve"]
    ctx = [s for s in spans if s.name == "ctx entity.decrement"]
    assert ctx, [s.name for s in spans]
    trace = request.context.trace_id
    assert invoke.context.trace_id == trace and all(c.context.trace_id == trace for c in ctx)
    assert all(c.parent is not None and c.parent.span_id == invoke.context.span_id for c in ctx)
    by_id = {s.context.span_id: s for s in spans}
    at, chain = invoke, []
    while at.parent is not None and at.parent.span_id in by_id:
        at = by_id[at.parent.span_id]
        chain.append(at.name)
    assert request.name in chain
