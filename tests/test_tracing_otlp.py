"""dap's own span recording and OTLP encoding (dap/tracing/spans.py, otlp.py): what a
collector receives is parsed with OpenTelemetry's protobuf schema and must hold every name, id,
parent link, attribute, event and status the spans were given, and equal what the SDK's own
encoder makes of the same spans. Nothing is mocked: the bytes are the ones that go on the wire."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource

from dap import tracing
from dap.tracing import otlp, spans, statements

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def statement(query: str, elapsed: float, exception: BaseException | None) -> None:
    """A statement's event as the connection wrapper makes it (``tracing.statements``)."""
    ended = time.time_ns()
    statements.event(query, ended - int(elapsed * 1e9), ended, exception)


def write(kept: list[spans.Record]) -> None:
    """A write as the server traces it: a request continuing a caller, its operation with two
    statements (one failed), an outbox traceparent, a 5xx answer; then a span a failure leaves."""
    with tracing.recording_into(kept.append):
        with tracing.span("POST", kind="server", parent=INCOMING) as root:
            attributes = {"dap.tenant": "t-1", "dap.workspace": "acme", "enduser.id": "u-7", "n": -3}
            with tracing.span("create tr/parcel", attributes={**attributes, "skip": None}):
                statement("INSERT INTO t_tr_parcel (a) VALUES ($1)", 0.00125, None)
                statement("SELECT x FROM dap.outbox", 0.002, ValueError("secret"))
                assert tracing.traceparent() is not None
            tracing.rename(root, "POST /{ws}/api/{module}/{entity}")
            tracing.annotate(root, **{"http.response.status_code": 503, "ok": False, "ratio": 0.5})
            tracing.failed(root, 503)
        with pytest.raises(KeyError), tracing.span("deliver", kind="consumer"):
            raise KeyError("k")


def decoded(data: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    message.ParseFromString(data)
    return message


def values(attributes: Any) -> dict[str, Any]:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in attributes}


def test_the_wire_holds_every_name_parent_attribute_event_and_status() -> None:
    kept: list[spans.Record] = []
    write(kept)
    resource = {"service.name": "svc", "telemetry.sdk.language": "python"}
    message = decoded(otlp.request(otlp.resource(resource), "dap", kept))
    (resource_spans,) = message.resource_spans
    assert values(resource_spans.resource.attributes) == resource
    (scope,) = resource_spans.scope_spans
    assert scope.scope.name == "dap"
    operation, root, deliver = scope.spans
    trace = bytes.fromhex(INCOMING.split("-")[1])
    assert root.trace_id == operation.trace_id == trace
    assert root.parent_span_id == bytes.fromhex(INCOMING.split("-")[2])
    assert root.flags == 0x300  # the parent is remote, and that is known
    assert operation.parent_span_id == root.span_id and operation.flags == 0x100
    assert root.name == "POST /{ws}/api/{module}/{entity}" and root.kind == 2 and operation.kind == 1
    assert values(root.attributes) == {"http.response.status_code": 503, "ok": False, "ratio": 0.5}
    assert values(operation.attributes) == {
        "dap.tenant": "t-1",
        "dap.workspace": "acme",
        "enduser.id": "u-7",
        "n": -3,
    }
    assert root.status.code == 2 and operation.status.code == 0
    assert [e.name for e in operation.events] == ["INSERT t_tr_parcel", "SELECT dap.outbox"]
    assert [values(e.attributes) for e in operation.events] == [
        {"db.duration_ms": 1.25},
        {"db.duration_ms": 2.0, "error.type": "ValueError"},
    ]
    back = 5_000_000  # an event is stamped when its statement began: before the span here (no real one)
    assert all(
        root.start_time_unix_nano - back <= e.time_unix_nano <= root.end_time_unix_nano
        for e in operation.events
    )
    assert operation.start_time_unix_nano <= operation.end_time_unix_nano
    assert deliver.parent_span_id == b"" and deliver.kind == 5 and deliver.trace_id != trace
    assert deliver.status.code == 2 and deliver.status.message == "KeyError: 'k'"
    (failure,) = deliver.events
    assert failure.name == "exception" and values(failure.attributes)["exception.type"] == "KeyError"


def test_the_encoding_equals_the_sdks_for_the_same_spans() -> None:
    kept: list[spans.Record] = []
    write(kept)
    resource = Resource.create({"service.name": "svc"})
    ours = decoded(otlp.request(otlp.resource(resource.attributes), "dap", kept))
    theirs = encode_spans([spans.readable(s, resource) for s in kept])
    assert ours == theirs
    # from the caches
    again = decoded(otlp.request(otlp.resource(resource.attributes), "dap", kept))
    assert again == theirs


def test_a_dropped_trace_records_nothing_and_a_sampled_parent_inside_it_does() -> None:
    kept: list[spans.Record] = []
    made: list[str] = []
    env = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}
    watch = made.append
    with (
        tracing.recording_into(kept.append, env, watch=lambda s: watch(s.name)),
        tracing.span("root", kind="server"),
        tracing.span("child"),
    ):
        statement("SELECT 1", 0.001, None)
        with tracing.span("delivery", parent=INCOMING) as inner:
            assert tracing.recording(inner)
    ((name, _, _, _, parent_id, remote, *_),) = kept
    assert made == ["delivery"] and name == "delivery"
    assert parent_id == int(INCOMING.split("-")[2], 16) and remote


def test_sampling_reads_the_standard_variables() -> None:
    assert tracing.sampling({}) == (1 << 64, True)
    assert tracing.sampling({"OTEL_TRACES_SAMPLER": "always_off"}) == (0, False)
    assert tracing.sampling({"OTEL_TRACES_SAMPLER": "parentbased_always_off"}) == (0, True)
    ratio = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    assert tracing.sampling(ratio) == (1 << 62, False)
    assert tracing.sampling({"OTEL_TRACES_SAMPLER": "jaeger_remote"}) == (1 << 64, True)


def test_a_span_ended_in_another_context_is_still_recorded_and_raises_nothing() -> None:
    import contextvars

    kept: list[spans.Record] = []

    def begun_here_ended_elsewhere() -> None:
        block = tracing.span("generator's span")
        block.__enter__()
        contextvars.copy_context().run(block.__exit__, None, None, None)

    with tracing.recording_into(kept.append):
        # in a context of its own: the span stays current there, not in the tests that follow
        contextvars.copy_context().run(begun_here_ended_elsewhere)
    ((name, _, _, _, _, _, start, end, *_),) = kept
    assert name == "generator's span" and end >= start
