"""Control-plane spans (issue 45): a registration and a snapshot pull are server spans of the
caller's trace. ``dap register`` runs as a real subprocess exporting OTLP/HTTP to a sink on
loopback (decoded with the OTLP protobuf schema); the control runs in this process with the
SDK's in-memory exporter; the server span's parent must be the command's span. A resource pod's
client sends the ``traceparent`` of its pull span. Off, the control's application has no
tracing middleware at all."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from dap import tracing
from dap.control.serving import traced
from dap.resource_pod import fetching
from tests.control.conftest import MakeDsn, Start, json_upload, manifests
from tests.control.test_cli import DAP, write_spec
from tests.control.test_cluster import FAST, eventually

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    with tracing.enabled_for_tests(found):
        yield found


@pytest.fixture
async def sink() -> AsyncIterator[tuple[str, list[Any]]]:
    """An OTLP/HTTP receiver on loopback: every span it was sent, decoded."""
    spans: list[Any] = []

    async def receive(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
        return web.Response(status=200, content_type="application/x-protobuf", body=b"")

    app = web.Application()
    app.router.add_post("/v1/traces", receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", spans
    await runner.cleanup()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_registration_and_snapshot_are_spans_of_the_callers_trace(
    exporter: InMemorySpanExporter, start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    upload = json_upload("buying", manifests(), ["acme"])
    async with http.post(
        f"{control.url}/v1/artifacts", json=upload, headers={"traceparent": INCOMING}
    ) as response:
        assert response.status == 200, await response.text()
        registered = await response.json()
    async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "acme"}) as response:
        assert response.status == 200
        etag = response.headers["ETag"]
    async with http.get(
        f"{control.url}/v1/snapshot", params={"workspace": "acme"}, headers={"If-None-Match": etag}
    ) as response:
        assert response.status == 304

    (register,) = _named(exporter, "POST /v1/artifacts")
    assert register.kind is SpanKind.SERVER
    assert f"{register.context.trace_id:032x}" == INCOMING.split("-")[1]
    assert register.parent is not None and f"{register.parent.span_id:016x}" == INCOMING.split("-")[2]
    assert register.attributes["dap.app"] == "buying"
    assert register.attributes["dap.artifact_id"] == registered["artifact_id"]
    assert register.attributes["dap.version"] == registered["version"]
    assert register.attributes["http.response.status_code"] == 200
    served, unchanged = _named(exporter, "GET /v1/snapshot")
    assert served.attributes["dap.workspace"] == "acme"
    assert served.attributes["dap.snapshot_version"] >= 1
    assert served.attributes["http.response.status_code"] == 200
    assert unchanged.attributes["http.response.status_code"] == 304
    assert served.parent is None  # no traceparent sent: a root of its own
    for span in exporter.get_finished_spans():  # names and ids, never the files' contents
        assert not any("apiVersion" in str(v) for v in span.attributes.values())


async def test_a_pods_pull_carries_its_span_to_the_control(
    exporter: InMemorySpanExporter, start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    client = fetching.Client(http, control.url)
    with tracing.span("pod snapshot pull", kind="client") as pull:
        answer = await client.snapshot("acme", etag=None)
    assert answer.body is not None
    (served,) = _named(exporter, "GET /v1/snapshot")
    assert served.context.trace_id == pull.trace_id
    assert served.parent is not None and served.parent.span_id == pull.span_id


async def test_dap_register_sends_its_span_to_the_control(
    exporter: InMemorySpanExporter, start_control: Start, sink: tuple[str, list[Any]], tmp_path: Path
) -> None:
    import asyncio

    control = await start_control()
    endpoint, received = sink
    spec = write_spec(tmp_path / "buying")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "register-test"}
    process = await asyncio.create_subprocess_exec(
        DAP, "register", str(spec), "--control-url", control.url, "--workspace", "acme",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()

    (command,) = [s for s in received if s.name == "dap register"]
    assert command.kind == 3  # SPAN_KIND_CLIENT in the OTLP schema
    attributes = {a.key: a.value.string_value or a.value.int_value for a in command.attributes}
    assert attributes["dap.app"] == "buying"
    assert attributes["http.response.status_code"] == 200
    assert attributes["dap.artifact_id"] in out.decode()
    (register,) = _named(exporter, "POST /v1/artifacts")
    assert register.context.trace_id == int.from_bytes(command.trace_id, "big")
    assert register.parent is not None and register.parent.span_id == int.from_bytes(command.span_id, "big")


async def test_off_the_control_has_no_tracing_middleware() -> None:
    assert not tracing.enabled()
    assert traced.middlewares() == []


async def test_a_cluster_control_serves_pulls_and_syncs_in_traces(
    exporter: InMemorySpanExporter,
    start_control: Start,
    make_dsn: MakeDsn,
    http: aiohttp.ClientSession,
) -> None:
    """A cluster control's sync is a client span whose calls the region serves as its children;
    a pod's pull served by the cluster control is a span with the snapshot's version."""
    region = await start_control(mode="region")
    async with http.post(f"{region.url}/v1/artifacts", json=json_upload("shop", manifests())) as response:
        assert response.status == 200, await response.text()
    options = {"mode": "cluster", "region_url": region.url, "cluster_id": "c1", **FAST}
    cluster = await start_control(dsn=await make_dsn(), **options)

    async def synced() -> bool:
        async with http.get(f"{cluster.url}/v1/snapshot", params={"workspace": "acme"}) as response:
            return response.status == 200

    await eventually(synced)
    syncs = _named(exporter, "cluster snapshot sync")
    assert syncs and syncs[0].attributes["dap.cluster"] == "c1"
    by_sync = {s.context.span_id for s in syncs}
    pulled = [s for s in _named(exporter, "GET /v1/snapshot") if s.parent and s.parent.span_id in by_sync]
    assert pulled and pulled[0].attributes["dap.cluster"] == "c1"  # the region served the sync's pull
    served = [s for s in _named(exporter, "GET /v1/snapshot") if s.attributes.get("dap.workspace") == "acme"]
    assert served and served[-1].attributes["http.response.status_code"] == 200
    assert served[-1].attributes["dap.snapshot_version"] >= 1


async def test_a_cluster_controls_placements_pull_is_a_span_the_region_continues(
    exporter: InMemorySpanExporter, start_control: Start, http: aiohttp.ClientSession
) -> None:
    from dap.control.kube import member

    region = await start_control(mode="region")
    options = member.Options(region_url=region.url, cluster="c1")
    puller = member.Member(options, client=None, session=http)  # type: ignore[arg-type] # the pull needs no API server
    pull_span = tracing.span("cluster placements pull", kind="client")
    with pull_span as pull, pytest.raises(member.PullError, match="404"):  # no Cluster: no API server here
        await puller.pull()
    (served,) = _named(exporter, "GET /v1/placements")
    assert served.parent is not None and served.parent.span_id == pull.span_id
    assert served.attributes["http.response.status_code"] == 404
