"""Traces (dap.tracing) on a real server and Postgres, exported to the SDK's in-memory exporter:
the request's span continues an incoming ``traceparent``; operations and SQL statements are its
children (statement names, never parameters); the event written in the request's transaction is
delivered by ANOTHER server (this one delivers nothing) as a child of the request, and the
webhook receiver gets a ``traceparent`` of that trace. Off, no span and no column value."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dap import tracing
from dap.server import state
from dap.server.catalog import Catalog
from dap.server.storage import db

from .conftest import load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "tr/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: tr}
spec: {title: Traced}
""",
    "tr/parcel.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: parcel, module: tr}
spec:
  fields:
    - {name: title, type: string, required: true}
  actions:
    - {name: ship, call: async}
  state_machine:
    states: [new, shipped]
    initial: new
    transitions:
      - {name: ship, from: [new], to: shipped, action: ship}
  events:
    - name: created
      deliver:
        - channel: webhook
          webhook: {url_from_config: trace_hook}
  expose:
    - type: rest
""",
}
INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hooks() -> AsyncIterator[tuple[list[dict[str, str]], str]]:
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield seen, f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    await runner.cleanup()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(SPEC)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    with tracing.enabled_for_tests(found):
        yield found


def env(**values: str) -> dict[str, str | None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    return saved


def restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


async def until(check: Any, seconds: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        found = check()
        if found or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.05)


def by_name(spans: Any, prefix: str) -> list[Any]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_one_trace_from_the_request_through_the_outbox_to_the_webhook_in_another_server(
    pg_dsn: str, catalog: Catalog, hooks: tuple[list[dict[str, str]], str], exporter: InMemorySpanExporter
) -> None:
    seen, url = hooks
    saved = env(DAP_CONFIG_TRACE_HOOK=url, DAP_EVENTS_DISPATCH="0")
    try:
        async with running(pg_dsn, catalog) as front:  # writes, delivers nothing
            restore({"DAP_EVENTS_DISPATCH": saved["DAP_EVENTS_DISPATCH"]})
            headers = {**front.auth(), "traceparent": INCOMING}
            async with front.http.post(
                f"{front.api}/default/api/tr/parcel", json={"title": "secret-title-42"}, headers=headers
            ) as resp:
                assert resp.status == 201
                record_id = (await resp.json())["data"]["id"]
            conn = await asyncpg.connect(pg_dsn)
            try:
                stored = await conn.fetchval(
                    "SELECT traceparent FROM dap.outbox WHERE record_id = $1 AND event = 'created'",
                    uuid.UUID(record_id),
                )
            finally:
                await conn.close()
            await asyncio.sleep(0.3)
            assert seen == []  # this server delivers nothing
            async with running(pg_dsn, catalog) as _deliverer:  # another server: it delivers
                assert await until(lambda: seen)
                assert await until(lambda: by_name(exporter.get_finished_spans(), "webhook"))
    finally:
        restore(saved)
    spans = exporter.get_finished_spans()
    ids = {s.context.span_id: s for s in spans}
    (request,) = by_name(spans, "POST /{ws}/api/")
    trace = request.context.trace_id
    # the incoming traceparent was honoured: same trace, its span is the request's parent
    assert f"{trace:032x}" == INCOMING.split("-")[1]
    assert request.parent is not None and f"{request.parent.span_id:016x}" == INCOMING.split("-")[2]
    assert request.attributes["http.response.status_code"] == 201
    assert request.attributes["dap.workspace"] == "default"
    (operation,) = by_name(spans, "create tr/parcel")
    assert operation.parent.span_id == request.context.span_id
    assert operation.attributes["enduser.id"] and operation.attributes["dap.tenant"]
    # each SQL statement is an event on the span that ran it: its name, when, how long; no values
    sql = [
        e for s in spans if s.context.trace_id == trace for e in s.events if "db.duration_ms" in e.attributes
    ]
    assert any(e.name.startswith("INSERT ") and "parcel" in e.name for e in operation.events), (
        operation.events
    )
    assert all(
        e.attributes["db.duration_ms"] >= 0 and operation.start_time <= e.timestamp for e in operation.events
    )
    assert all(
        "secret-title-42" not in e.name and not any("secret" in str(v) for v in e.attributes.values())
        for e in sql
    )
    # the outbox row kept a traceparent of the request's trace
    assert stored is not None and stored.split("-")[1] == f"{trace:032x}"
    # delivery: outbox span → deliver span → webhook span, all in the request's trace
    (outbox,) = by_name(spans, "outbox tr/parcel.created")
    (deliver,) = by_name(spans, "deliver ")
    (webhook,) = by_name(spans, "webhook POST")
    assert {outbox.context.trace_id, deliver.context.trace_id, webhook.context.trace_id} == {trace}
    assert deliver.parent.span_id == outbox.context.span_id
    assert webhook.parent.span_id == deliver.context.span_id
    chain, at = [], outbox
    while at.parent is not None and at.parent.span_id in ids:  # up to the request
        at = ids[at.parent.span_id]
        chain.append(at.name)
    assert request.name in chain
    # the receiver got the webhook span's traceparent
    (hook,) = seen
    assert hook["traceparent"] == f"00-{trace:032x}-{webhook.context.span_id:016x}-01"


async def test_log_lines_carry_the_trace_and_off_means_no_spans_nor_traceparent(
    pg_dsn: str, catalog: Catalog, hooks: tuple[list[dict[str, str]], str]
) -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter), tracing.span("outer") as span:
        from dap import logs

        line = logs.Entry(__import__("logging").LogRecord("t", 20, __file__, 1, "m", None, None), None)
        assert line.trace_id == f"{span.trace_id:032x}"
        assert tracing.traceparent() is not None
    assert not tracing.enabled() and tracing.traceparent() is None
    assert tracing.span("anything") is tracing.span("else")  # one shared no-op
    seen, url = hooks
    seen.clear()
    saved = env(DAP_CONFIG_TRACE_HOOK=url)
    try:
        async with running(pg_dsn, catalog) as srv:
            async with srv.http.post(
                f"{srv.api}/default/api/tr/parcel", json={"title": "untraced"}, headers=srv.auth()
            ) as resp:
                assert resp.status == 201
            assert await until(lambda: seen)
    finally:
        restore(saved)
    assert "traceparent" not in seen[0]
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM dap.outbox WHERE traceparent IS NULL "
                "AND payload->'record'->>'title' = 'untraced'"
            )
            == 1
        )
    finally:
        await conn.close()


async def test_a_job_runs_in_the_trace_of_the_request_that_queued_it(
    pg_dsn: str, catalog: Catalog, hooks: tuple[list[dict[str, str]], str], exporter: InMemorySpanExporter
) -> None:
    saved = env(DAP_CONFIG_TRACE_HOOK=hooks[1])
    try:
        async with running(pg_dsn, catalog) as srv:
            url = f"{srv.api}/default/api/tr/parcel"
            async with srv.http.post(url, json={"title": "to ship"}, headers=srv.auth()) as resp:
                assert resp.status == 201
                record = (await resp.json())["data"]
            exporter.clear()
            async with srv.http.post(f"{url}/{record['id']}/ship", json={}, headers=srv.auth()) as resp:
                assert resp.status == 202, await resp.text()
            assert await until(lambda: by_name(exporter.get_finished_spans(), "job "))
    finally:
        restore(saved)
    spans = exporter.get_finished_spans()
    (request,) = [s for s in spans if s.name.startswith("POST /{ws}/api/") and s.kind.name == "SERVER"]
    (job,) = by_name(spans, "job ")
    assert job.context.trace_id == request.context.trace_id
    assert job.attributes["dap.job_id"] and job.attributes["dap.tenant"]
    by_id = {s.context.span_id: s for s in spans}
    at, chain = job, []
    while at.parent is not None and at.parent.span_id in by_id:
        at = by_id[at.parent.span_id]
        chain.append(at.name)
    assert request.name in chain


async def test_a_dropped_trace_makes_no_spans_below_its_root_but_still_propagates() -> None:
    exporter = InMemorySpanExporter()
    off = {"OTEL_TRACES_SAMPLER": "always_off"}
    with tracing.enabled_for_tests(exporter, off), tracing.span("root") as root:
        assert not tracing.recording(root)
        assert tracing.span("child") is tracing.span("other")  # the shared no-op: nothing made
        found = tracing.traceparent()
        assert found is not None and int(found[-2:], 16) & 1 == 0  # not sampled: receivers drop it too
    assert exporter.get_finished_spans() == ()


async def test_a_request_of_a_dropped_trace_exports_nothing(pg_dsn: str, catalog: Catalog) -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter, {"OTEL_TRACES_SAMPLER": "always_off"}):
        async with running(pg_dsn, catalog) as srv:
            async with srv.http.get(f"{srv.api}/default/api/tr/parcel", headers=srv.auth()) as resp:
                assert resp.status == 200
            # no query logger was left on a pooled connection
            pool = srv.server.app[state.POOL]
            async with pool.acquire() as conn:
                assert not conn._con._query_loggers
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("rate", ["0", "0.5", "1"])
async def test_a_ratio_sampler_decides_roots_early_and_exactly_as_the_sdk(rate: str) -> None:
    exporter = InMemorySpanExporter()
    env = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": rate}
    kept: list[int] = []
    with tracing.enabled_for_tests(exporter, env=env):
        bound = round(float(rate) * 2**64)
        for _ in range(400):
            with tracing.span("root", kind="server") as root, tracing.span("child"):
                found = tracing.traceparent()
                assert found is not None
                trace_id, flags = int(found.split("-")[1], 16), int(found[-2:], 16)
                sampled = (trace_id & (2**64 - 1)) < bound  # TraceIdRatioBased's own rule
                assert bool(flags & 1) == sampled == tracing.recording(root)
                if sampled:
                    kept.append(trace_id)
    spans = exporter.get_finished_spans()
    assert sorted({s.context.trace_id for s in spans}) == sorted(kept)
    assert len(spans) == 2 * len(kept)  # root and child of every kept trace, nothing of the others
    assert {"0": len(kept) == 0, "1": len(kept) == 400, "0.5": 120 < len(kept) < 280}[rate]


async def test_statement_names_are_verb_and_table() -> None:
    assert tracing.statement_name("SELECT id FROM dap.outbox o WHERE x = $1") == "SELECT dap.outbox"
    assert tracing.statement_name("  insert into t_tr_parcel (a) values ($1)") == "INSERT t_tr_parcel"
    assert tracing.statement_name("BEGIN") == "BEGIN"
    joined = "WITH w AS (INSERT INTO t_x (a, b) VALUES ($1, $2) RETURNING *), e AS (INSERT INTO dap.outbox"
    assert tracing.statement_name(joined) == "INSERT t_x"
    assert tracing.wanted({}) is False
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is True
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}) is False
    assert (
        tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) is False
    )


async def test_batches_are_larger_than_the_sdks_unless_the_variables_say() -> None:
    assert tracing.batching({}) == {
        "max_queue_size": 16384,
        "max_export_batch_size": 2048,
        "schedule_delay_millis": 5000,
    }
    given = tracing.batching({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100", "OTEL_BSP_SCHEDULE_DELAY": " "})
    assert given == {"max_queue_size": 16384, "max_export_batch_size": 100, "schedule_delay_millis": 5000}
    given = tracing.batching({"OTEL_BSP_MAX_QUEUE_SIZE": "64", "OTEL_BSP_SCHEDULE_DELAY": "-1"})
    assert given == {"max_queue_size": 64, "max_export_batch_size": 64, "schedule_delay_millis": 5000}


async def test_a_failed_statement_is_an_event_with_its_error_type() -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter), tracing.span("op"):
        began = time.time_ns() - 2_000_000
        tracing.statements.event(
            "UPDATE t_x SET a = $1", began, began + 2_000_000, ValueError("secret value")
        )
    (span,) = exporter.get_finished_spans()
    (event,) = span.events
    assert event.name == "UPDATE t_x"
    assert dict(event.attributes) == {"db.duration_ms": 2.0, "error.type": "ValueError"}
    assert span.start_time - 5_000_000 <= event.timestamp <= span.end_time


async def test_a_sampled_spans_connection_records_each_statement_and_a_dropped_ones_is_untouched(
    pg_dsn: str,
) -> None:
    exporter = InMemorySpanExporter()
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        with tracing.enabled_for_tests(exporter):
            with tracing.span("op"):
                async with db.connection(pool) as conn:
                    assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", "x") == 0
                    with pytest.raises(asyncpg.DivisionByZeroError):
                        await conn.execute("SELECT 1 / $1::int", 0)
                    async with conn.transaction():  # the connection's own methods still answer
                        assert dict(await conn.fetchrow("SELECT 1 AS one")) == {"one": 1}
            with tracing.span("plain", parent="00-" + "1" * 32 + "-" + "2" * 16 + "-00"):  # dropped
                async with db.connection(pool) as conn:
                    assert type(conn) is not tracing.statements.Timed
                    assert await conn.fetchval("SELECT 2") == 2
    finally:
        await pool.close()
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events] == ["SELECT pg_class", "SELECT", "SELECT"]  # no BEGIN, COMMIT
    assert [e.attributes.get("error.type") for e in span.events] == [None, "DivisionByZeroError", None]
    assert all(span.start_time <= e.timestamp <= span.end_time for e in span.events)
    assert all(0 <= e.attributes["db.duration_ms"] < 60_000 for e in span.events)
