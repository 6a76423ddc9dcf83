"""At 1 % sampling the other 99 requests must cost almost nothing (issue 45): a dropped trace
makes no span anywhere (counted with the recorder's own hook, called for every span it makes),
exports nothing, yet its ``traceparent`` with the sampled
flag ``00`` still reaches the outbox row and the webhook, so a receiver drops it too. A sampled
incoming ``traceparent`` is still honoured at 1 %, with the whole chain exported."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dap import tracing
from dap.server.catalog import Catalog

from .conftest import load, running
from .test_tracing import SPEC, env, restore, until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"


class Counting:
    """The spans the recorder makes, counted (``spans.watch``: called for every one)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, span: Any) -> None:
        self.calls += 1


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(SPEC)


@pytest_asyncio.fixture(loop_scope="module")
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
    saved = env(DAP_CONFIG_TRACE_HOOK=f"http://127.0.0.1:{runner.addresses[0][1]}/hook")
    yield seen, ""
    restore(saved)
    await runner.cleanup()


def sampling(rate: str) -> dict[str, str]:
    return {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": rate}


def watched(rate: str, exporter: InMemorySpanExporter) -> tuple[Counting, Any]:
    counted = Counting()
    manager = tracing.enabled_for_tests(exporter, env=sampling(rate), watch=counted)
    manager.__enter__()
    return counted, manager


@pytest.fixture
def dropped_all() -> Iterator[tuple[Counting, InMemorySpanExporter]]:
    """Tracing at a ratio of 0 (every root dropped), parent-based as at 1 %."""
    exporter = InMemorySpanExporter()
    counted, manager = watched("0", exporter)
    try:
        yield counted, exporter
    finally:
        manager.__exit__(None, None, None)


async def outbox_traceparent(dsn: str, record_id: str) -> str | None:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetchval(
            "SELECT traceparent FROM dap.outbox WHERE record_id = $1 AND event = 'created'",
            uuid.UUID(record_id),
        )
    finally:
        await conn.close()
    return found  # type: ignore[no-any-return]


async def create(srv: Any, headers: dict[str, str] | None = None) -> str:
    async with srv.http.post(
        f"{srv.api}/default/api/tr/parcel", json={"title": "t"}, headers={**srv.auth(), **(headers or {})}
    ) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["data"]["id"])


async def test_an_unsampled_request_makes_no_sdk_span_exports_nothing_and_still_propagates(
    pg_dsn: str,
    catalog: Catalog,
    hooks: tuple[list[dict[str, str]], str],
    dropped_all: tuple[Counting, InMemorySpanExporter],
) -> None:
    counted, exporter = dropped_all
    seen, _ = hooks
    async with running(pg_dsn, catalog) as srv:  # writes and delivers
        record_id = await create(srv)
        async with srv.http.get(f"{srv.api}/default/api/tr/parcel/{record_id}", headers=srv.auth()) as resp:
            assert resp.status == 200
        async with srv.http.get(f"{srv.api}/default/api/tr/parcel", headers=srv.auth()) as resp:
            assert resp.status == 200
        assert await until(lambda: seen)  # the delivery ran (under the stored, unsampled parent)
        stored = await outbox_traceparent(pg_dsn, record_id)
    # the request, its operation, its statements, the outbox, the delivery and the webhook: no
    # span of the SDK was started (not even a non-recording one), nothing exported
    assert counted.calls == 0
    assert exporter.get_finished_spans() == ()
    # W3C still propagated: the outbox kept the trace with the flag 00, the webhook got it
    assert stored is not None and stored.endswith("-00")
    (hook,) = seen
    assert hook["traceparent"].split("-")[1] == stored.split("-")[1] and hook["traceparent"].endswith("-00")


async def test_an_incoming_unsampled_traceparent_is_dropped_without_the_sdk_even_at_100_percent(
    pg_dsn: str, catalog: Catalog, hooks: tuple[list[dict[str, str]], str]
) -> None:
    exporter = InMemorySpanExporter()
    counted, manager = watched("1", exporter)  # every new root would be sampled
    try:
        async with running(pg_dsn, catalog) as srv:
            record_id = await create(srv, {"traceparent": UNSAMPLED})
            stored = await outbox_traceparent(pg_dsn, record_id)
            assert await until(lambda: hooks[0])
    finally:
        manager.__exit__(None, None, None)
    assert counted.calls == 0 and exporter.get_finished_spans() == ()
    trace = UNSAMPLED.split("-")[1]
    assert stored is not None and stored.split("-")[1] == trace and stored.endswith("-00")
    assert stored.split("-")[2] != UNSAMPLED.split("-")[2]  # this process's span id, not the caller's


async def test_an_incoming_sampled_traceparent_is_honoured_at_1_percent(
    pg_dsn: str, catalog: Catalog, hooks: tuple[list[dict[str, str]], str]
) -> None:
    exporter = InMemorySpanExporter()
    counted, manager = watched("0.01", exporter)
    try:
        async with running(pg_dsn, catalog) as srv:
            record_id = await create(srv, {"traceparent": SAMPLED})
            assert await until(
                lambda: [s for s in exporter.get_finished_spans() if s.name.startswith("webhook")]
            )
            stored = await outbox_traceparent(pg_dsn, record_id)
    finally:
        manager.__exit__(None, None, None)
    trace = int(SAMPLED.split("-")[1], 16)
    names = {s.name.split(" ")[0] for s in exporter.get_finished_spans() if s.context.trace_id == trace}
    assert {"POST", "create", "outbox", "deliver", "webhook"} <= names, names
    assert counted.calls >= 5
    assert stored is not None and stored.endswith("-01") and int(stored.split("-")[1], 16) == trace
    (hook,) = hooks[0]
    assert hook["traceparent"].endswith("-01") and int(hook["traceparent"].split("-")[1], 16) == trace


async def test_a_sampled_parent_inside_a_dropped_block_records_and_the_block_stays_dropped() -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter, env=sampling("0")):
        with tracing.span("root", kind="server") as root:
            assert root is None and not tracing.recording_now()
            dropped = tracing.traceparent()
            assert dropped is not None and dropped.endswith("-00")
            assert tracing.current_ids() == tuple(dropped.split("-")[1:3])
            with tracing.span("delivery", parent=SAMPLED) as inner:
                assert tracing.recording(inner) and tracing.recording_now()
                assert tracing.traceparent() != dropped
            assert tracing.traceparent() == dropped
        assert tracing.traceparent() is None
    (span,) = exporter.get_finished_spans()
    assert span.name == "delivery" and f"{span.parent.span_id:016x}" == SAMPLED.split("-")[2]  # type: ignore[union-attr]


async def test_a_parent_that_is_not_w3c_is_as_none_given() -> None:
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter, env=sampling("0")):
        with tracing.span("root", kind="server"):
            assert tracing.span("delivery", parent="not-a-traceparent") is tracing.span("other")
        with tracing.span("root", kind="server", parent="00-zz") as root:
            assert root is None and (tracing.traceparent() or "").endswith("-00")  # a new, dropped root
    assert exporter.get_finished_spans() == ()
