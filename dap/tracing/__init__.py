"""Traces: spans exported over OTLP/HTTP, off unless the ``OTEL_*`` variables ask for them.

Every dap process calls :func:`configure` at start. Tracing turns on when an OTLP endpoint is
named (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or
``OTEL_TRACES_EXPORTER`` is ``otlp``, and ``OTEL_SDK_DISABLED`` is not ``true``. The standard
variables keep their meaning: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (read by the
SDK's ``Resource``), ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (the six built-in
samplers: ``always_on``, ``always_off``, ``traceidratio`` and their ``parentbased_`` forms; the
default ``parentbased_always_on``), ``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``,
``OTEL_BSP_SCHEDULE_DELAY``, and every ``OTEL_EXPORTER_OTLP_*`` (read by the OTLP/HTTP
exporter's client, which sends the batches). Jaeger, the OpenTelemetry Collector, Tempo and most
vendors take OTLP/HTTP on port 4318.

The spans themselves are dap's (``dap.tracing.spans``): ``__slots__`` objects in a ``ContextVar``,
turned into plain records when they end and written in chunks to a sending process of their own
(``dap.tracing.exporting``), which encodes them to OTLP's protobuf bytes in bulk
(``dap.tracing.otlp``) and sends them (``dap.tracing.sender``). The SDK's span objects, batch
processor and encoder cost a sampled write about 150 µs of the server's CPU; these a small fraction
(docs/performance.md).

Off, nothing of OpenTelemetry is imported and every helper here is a constant-time no-op:
:func:`span` hands back one shared empty context manager, :func:`traceparent` is ``None``.

Context crosses process boundaries as W3C Trace Context: the ``traceparent`` header on HTTP
(requests in, the bridge's invoke and ``/ctx`` calls, webhooks out), and the ``traceparent``
column of ``dap.outbox`` (and ``dap.jobs``), so a delivery seconds later, in another process, is a
child of the request that wrote the event. Spans never carry parameters, bodies or record values:
names, tenants, principals, ids.

Sampling is decided once, at a trace's root (by ``TraceIdRatioBased``'s rule: the trace id's low
64 bits under the bound), or from an incoming ``traceparent`` (its sampled flag when parent-based,
else the same rule on its trace id). A dropped trace is a ``spans.Unsampled`` (two ints) current
for the block: nothing is made below it, and :func:`traceparent` still gives its W3C string with
the flag ``00`` (stored in the outbox, sent to webhooks and the bridge) so whoever continues the
trace drops it too.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeGuard, TypeVar

from dap import logs
from dap.tracing import exporting, spans, statements
from dap.tracing.spans import Span, Unsampled
from dap.tracing.statements import statement_name

__all__ = [
    "TRACEPARENT",
    "annotate",
    "batching",
    "configure",
    "current_ids",
    "enabled",
    "enabled_for_tests",
    "exporting",
    "failed",
    "flush",
    "inject",
    "operation",
    "recording",
    "recording_into",
    "recording_now",
    "rename",
    "sampling",
    "served",
    "shutdown",
    "span",
    "spans",
    "statement_name",
    "statements",
    "timed",
    "traceparent",
    "wanted",
]

log = logging.getLogger("dap.tracing")

TRACEPARENT = "traceparent"
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_NOOP = contextlib.nullcontext(None)
_LOW64 = (1 << 64) - 1
_ALL = 1 << 64  # a bound every trace id's low 64 bits are under: always on

_on = False
_BOUND = _ALL  # a root is sampled when its trace id's low 64 bits are under it
_PARENT_BASED = True  # whether a traceparent's sampled flag decides (parentbased_…)
_exporter: exporting.Exporter | None = None
_CURRENT = spans.CURRENT


def sampling(env: Mapping[str, str]) -> tuple[int, bool]:
    """``OTEL_TRACES_SAMPLER(_ARG)`` as (the bound on a root's trace id, parent-based), by the rules
    of the SDK's built-in samplers; an unknown name is the default ``parentbased_always_on``."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    parent_based = name.startswith("parentbased_")
    rule = name.removeprefix("parentbased_")
    if rule == "always_on":
        return _ALL, parent_based
    if rule == "always_off":
        return 0, parent_based
    if rule == "traceidratio":
        try:
            rate = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
        except ValueError:
            rate = 1.0
        return round(min(1.0, max(0.0, rate)) * _ALL), parent_based  # TraceIdRatioBased's bound
    log.warning("tracing: OTEL_TRACES_SAMPLER=%s is not built in; parentbased_always_on instead", name)
    return _ALL, True


def _start(sink: Callable[[spans.Record], None], bound: int, parent_based: bool) -> None:
    global _on, _BOUND, _PARENT_BASED
    spans.sink = sink
    _BOUND, _PARENT_BASED, _on = bound, parent_based, True
    logs.trace_ids = current_ids


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (see the module)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return (
        exporter == "otlp"
        or bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
        or bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip())
    )


def enabled() -> bool:
    return _on


def configure(service: str, env: Mapping[str, str] = os.environ) -> bool:
    """Start exporting spans when the environment asks for them (``OTEL_SERVICE_NAME`` wins over
    ``service``); whether tracing is on. Idempotent: a second call keeps the first exporter."""
    global _exporter
    if _on:
        return True
    if not wanted(env):
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service})
    sizes = batching(env)
    spawn = exporting.spawner(_endpoint(env), sizes["max_export_batch_size"], sizes["schedule_delay_millis"])
    _exporter = exporting.Exporter(
        spawn,
        dict(resource.attributes),
        max_queue_size=sizes["max_queue_size"],
        schedule_delay_millis=sizes["schedule_delay_millis"],
    )
    _start(_exporter.put, *sampling(env))
    return True


# the export's settings where the OTEL_BSP_* variables give none: (variable, dap's value)
_BATCHING = {
    "max_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", 16384),
    "max_export_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 2048),
    "schedule_delay_millis": ("OTEL_BSP_SCHEDULE_DELAY", 5000),
}


def batching(env: Mapping[str, str]) -> dict[str, int]:
    """Larger batches and queue than the SDK's defaults (512 of 2048, which a server sampling 100 %
    of 1,000 requests per second fills in a second and then drops spans from): fewer exports, each
    an HTTP request. A variable that is set to a positive integer wins; a batch is at most the
    queue."""
    sizes = {}
    for arg, (variable, value) in _BATCHING.items():
        given = env.get(variable, "").strip()
        sizes[arg] = int(given) if given.isdigit() and int(given) > 0 else value
    sizes["max_export_batch_size"] = min(sizes["max_export_batch_size"], sizes["max_queue_size"])
    return sizes


def _endpoint(env: Mapping[str, str]) -> str | None:
    """The traces URL as the OTLP/HTTP exporter derives it, from ``env`` (not only os.environ)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def shutdown() -> None:
    """Send what is queued and stop exporting (process exit, tests)."""
    global _on, _exporter, _BOUND, _PARENT_BASED
    exporter, _exporter = _exporter, None
    _on, _BOUND, _PARENT_BASED = False, _ALL, True
    logs.trace_ids = None
    spans.sink = spans._nowhere
    if exporter is not None:
        exporter.shutdown()


def flush(timeout_ms: int = 10_000) -> bool:
    """Send what is queued now and wait until it was sent (``dap register`` before it exits);
    whether it was within ``timeout_ms``."""
    return _exporter is None or _exporter.flush(timeout_ms / 1000.0)


def _span_id() -> int:
    return random.getrandbits(64) or 1


def span(
    name: str,
    *,
    kind: str = "internal",
    parent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A span around a block, current inside it; ``parent``: a ``traceparent`` to continue (a
    request's header, an outbox row's column) instead of the current span; one that is not W3C is
    as none given. What the block gets: the ``spans.Span`` when it records, else ``None``."""
    if not _on:
        return _NOOP
    if parent is not None and _TRACEPARENT.fullmatch(parent):
        return _continued(name, kind, parent, attributes)
    current = _CURRENT.get()
    if current is None:
        return _root(name, kind, attributes)
    if type(current) is Unsampled:  # a dropped trace: nothing below its root either
        return _NOOP
    cleaned = _clean(attributes) if attributes else None
    return Span(name, kind, current.trace_id, _span_id(), current.span_id, False, cleaned)


def _root(name: str, kind: str, attributes: Mapping[str, Any] | None) -> Span | Unsampled:
    """A new trace: both ids from one random call, judged by the ratio's rule."""
    bits = random.getrandbits(192)
    trace_id, span_id = (bits >> 64) or 1, (bits & _LOW64) or 1
    if (trace_id & _LOW64) >= _BOUND:
        return Unsampled(trace_id, span_id)
    return Span(name, kind, trace_id, span_id, 0, False, _clean(attributes) if attributes else None)


def _continued(name: str, kind: str, parent: str, attributes: Mapping[str, Any] | None) -> Span | Unsampled:
    """A span of another process's trace (``parent``: a W3C ``traceparent``)."""
    trace_id, parent_id = int(parent[3:35], 16), int(parent[36:52], 16)
    if not trace_id or not parent_id:  # all zeros is invalid (W3C): a trace of our own
        return _root(name, kind, attributes)
    # parent-based: the parent's sampled flag; else the root's rule on the parent's trace id
    sampled = bool(int(parent[53:55], 16) & 1) if _PARENT_BASED else (trace_id & _LOW64) < _BOUND
    if not sampled:
        return Unsampled(trace_id, _span_id())
    cleaned = _clean(attributes) if attributes else None
    return Span(name, kind, trace_id, _span_id(), parent_id, True, cleaned)


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {
        k: v if isinstance(v, (str, bool, int, float)) else str(v)
        for k, v in attributes.items()
        if v is not None
    }


def recording_now() -> bool:
    """Whether the current span records: SQL statements get events only then (``storage.db``
    hands out a connection taken inside a sampled span through :func:`timed`, and only then)."""
    return _on and type(_CURRENT.get()) is Span


def recording(span: Any) -> TypeGuard[Span]:
    """Whether ``span`` (what :func:`span` yielded: ``None`` when off or dropped) records."""
    return type(span) is Span


def annotate(span: Any, **attributes: Any) -> None:
    """Attributes on ``span`` (what :func:`span` yielded: ``None`` when off)."""
    if type(span) is Span:
        cleaned = _clean(attributes)
        if cleaned:
            span.attributes.update(cleaned)


def rename(span: Any, name: str) -> None:
    if type(span) is Span:
        span.name = name


def failed(span: Any, status: int) -> None:
    """Mark a server span as an error for a 5xx answer (a 4xx is the client's, per the semconv)."""
    if status >= 500 and type(span) is Span and span.error is None:
        span.error = ""


def served(span: Span, name: str, attributes: dict[str, str | int], status: int) -> None:
    """A server span's answer: its name (method and route), ``attributes`` (texts and integers
    already: not cleaned; the span may keep the dict itself) and, for a 5xx ``status``, the
    error mark (see :func:`failed`)."""
    span.name = name
    if span.attributes:
        span.attributes.update(attributes)
    else:  # the usual case: a dict of the caller's own, taken rather than copied
        span.attributes = attributes
    failed(span, status)


def traceparent() -> str | None:
    """The current span's W3C ``traceparent`` (flag ``00`` in a dropped trace); ``None`` when off
    or outside any span."""
    if not _on:
        return None
    current = _CURRENT.get()
    return None if current is None else current.traceparent()


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current ``traceparent`` to outgoing ``headers`` (nothing when off)."""
    found = traceparent()
    if found is not None:
        headers[TRACEPARENT] = found


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, for the log lines."""
    current = _CURRENT.get()
    if current is None:
        return None
    return f"{current.trace_id:032x}", f"{current.span_id:016x}"


# -- operations -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _text(tenant: Any) -> str:
    """A tenant's id as text, once per tenant (``UUID.__str__`` formats and slices every time)."""
    return str(tenant)


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
C = TypeVar("C")


def operation(verb: str) -> Callable[[F], F]:
    """A span per call of an entity verb (``operations.create`` …) whose first argument is the
    protocol-neutral ``Call``: the tenant, workspace, entity and principal as attributes. Off, the
    wrapper only tests one global and awaits the verb."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def traced(call: Any, *args: Any, **kwargs: Any) -> Any:
            if not _on:
                return await fn(call, *args, **kwargs)
            current = _CURRENT.get()
            if type(current) is Unsampled:
                return await fn(call, *args, **kwargs)
            workspace, entity = call.workspace, call.resource.key
            attributes = {
                "dap.tenant": _text(workspace.tenant_id),
                "dap.workspace": workspace.slug,
                "dap.entity": entity,
                "enduser.id": call.principal.sub,
                "dap.request_id": call.request_id,
            }
            name = f"{verb} {entity}"
            # texts all: a child of the current span is made here, without span()'s cleaning
            block = (
                Span(name, "internal", current.trace_id, _span_id(), current.span_id, False, attributes)
                if type(current) is Span
                else span(name, attributes=attributes)
            )
            with block:
                return await fn(call, *args, **kwargs)

        return traced  # type: ignore[return-value]

    return wrap


# -- SQL statements ---------------------------------------------------------------------------


def timed(conn: C) -> C:
    """``conn`` with an event per statement on the span that runs it (``dap.tracing.statements``)
    inside a sampled span (:func:`recording_now`); elsewhere ``conn`` itself."""
    if _on and type(_CURRENT.get()) is Span:
        return statements.Timed(conn)  # type: ignore[return-value]  # conn's methods, and events
    return conn


@contextlib.contextmanager
def recording_into(
    sink: Callable[[spans.Record], None],
    env: Mapping[str, str] | None = None,
    watch: Callable[[spans.Span], Any] | None = None,
) -> Iterator[None]:
    """Tracing on for a block, every ended span's record (``spans.Record``) handed to ``sink`` in
    the ending thread; ``env``: ``OTEL_TRACES_SAMPLER(_ARG)`` as :func:`configure` reads them;
    ``watch``: called with every span made (tests count them). Off again after it, as it was
    before."""
    saved = (_on, _BOUND, _PARENT_BASED, logs.trace_ids, spans.sink, spans.watch)
    spans.watch = watch
    _start(sink, *sampling(env or {}))
    try:
        yield
    finally:
        _restore(*saved)


def _restore(on: bool, bound: int, parent_based: bool, ids: Any, sink: Any, watch: Any) -> None:
    global _on, _BOUND, _PARENT_BASED
    _on, _BOUND, _PARENT_BASED, logs.trace_ids, spans.sink, spans.watch = (
        on,
        bound,
        parent_based,
        ids,
        sink,
        watch,
    )


@contextlib.contextmanager
def enabled_for_tests(
    exporter: Any,
    env: Mapping[str, str] | None = None,
    watch: Callable[[spans.Span], Any] | None = None,
) -> Iterator[None]:
    """Tracing on with ``exporter`` (the SDK's in-memory one) for a test: every span, as it ends,
    converted to the SDK's ``ReadableSpan`` (``spans.readable``) and exported."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({})
    with recording_into(lambda r: exporter.export([spans.readable(r, resource)]), env, watch):
        yield
