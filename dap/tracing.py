"""Traces: OpenTelemetry spans exported over OTLP, off unless the ``OTEL_*`` variables ask for them.

Every dap process calls :func:`configure` at start. Tracing turns on when an OTLP endpoint is
named (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or
``OTEL_TRACES_EXPORTER`` is ``otlp``, and ``OTEL_SDK_DISABLED`` is not ``true``. The SDK reads
the rest of the standard variables itself: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (``parentbased_traceidratio`` and ``0.01``:
1 %), ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_BSP_*``. The exporter is OTLP over HTTP/protobuf
(Jaeger, the OpenTelemetry Collector, Tempo and most vendors take it on port 4318).

Off, nothing of OpenTelemetry is imported and every helper here is a constant-time no-op:
:func:`span` hands back one shared empty context manager, :func:`traceparent` is ``None``. That
is the "no cost when off" of ARCHITECTURE.md: callers never test whether tracing is on.

Context crosses process boundaries as W3C Trace Context: the ``traceparent`` header on HTTP
(requests in, the bridge's invoke and ``/ctx`` calls, webhooks out), and the ``traceparent``
column of ``dap.outbox`` (and ``dap.jobs``), so a delivery seconds later, in another process, is a
child of the request that wrote the event. Spans never carry parameters, bodies or record values:
names, tenants, principals, ids.

Sampling is decided once, at a trace's root (or from an incoming ``traceparent``'s sampled flag
under ``parentbased_traceidratio``). A dropped trace, 99 requests of 100 at 1 %, makes no object
of the SDK anywhere below: one :class:`_Unsampled` (two ints) is current, every helper tests it
first, and :func:`traceparent` still gives its W3C string with the flag ``00`` (stored in the
outbox, sent to webhooks and the bridge) so whoever continues the trace drops it too.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from dap import logs

TRACEPARENT = "traceparent"
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_NOOP = contextlib.nullcontext(None)

_tracer: Any = None  # an opentelemetry Tracer while on
_provider: Any = None
_api: Any = None  # the ``opentelemetry.trace`` module while on (imported once, by ``_start``)
_KIND: dict[str, Any] = {}  # "server" → SpanKind.SERVER …


_ROOTS: Any = None  # the provider's id generator, which hands a root the trace id decided here
_BOUND: int | None = None  # a ratio sampler's bound on a trace id's low 64 bits; None: no ratio
_PARENT_BASED = False  # whether the ratio sampler follows a parent's sampled flag (parentbased_…)
_LOW64 = (1 << 64) - 1


class _Unsampled:
    """A trace the sampler dropped, current for a block: its trace id and this process's span id,
    nothing of the SDK. It is what a 1 % sampling's other 99 requests carry: every helper below
    tests :data:`_DROPPED` first and does nothing (no span, no event, no query logger), but
    :func:`traceparent` still hands out the W3C string with the sampled flag ``00``, so the outbox
    row, the webhook, the bridge's app and a delivery in another process drop the trace alike."""

    __slots__ = ("_token", "span_id", "trace_id")

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def __enter__(self) -> None:
        self._token = _DROPPED.set(self)

    def __exit__(self, *_: object) -> None:
        _DROPPED.reset(self._token)

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-00"


_DROPPED: contextvars.ContextVar[_Unsampled | None] = contextvars.ContextVar("dap_dropped", default=None)


@contextlib.contextmanager
def _sampled_inside(inner: Any) -> Iterator[Any]:
    """``inner`` (an SDK span's context manager) entered with no dropped trace current: a sampled
    ``parent`` continued inside a dropped block (rare: another trace's delivery)."""
    token = _DROPPED.set(None)
    try:
        with inner as found:
            yield found
    finally:
        _DROPPED.reset(token)


def _start(provider: Any, roots: Any = None, bound: int | None = None, parent_based: bool = False) -> None:
    """Serve spans from ``provider`` (the process's, or a test's); ``roots``, ``bound`` and
    ``parent_based``: the early sampling decisions of :func:`_root` and :func:`span` for a ratio
    sampler."""
    global _tracer, _provider, _api, _ROOTS, _BOUND, _PARENT_BASED
    from opentelemetry import trace

    _api = trace
    _KIND.update({k.name.lower(): k for k in trace.SpanKind})
    _provider, _tracer = provider, provider.get_tracer("dap")
    _ROOTS, _BOUND, _PARENT_BASED = roots, bound, parent_based
    logs.trace_ids = current_ids


def _ratio_sampling(env: Mapping[str, str]) -> tuple[Any, Any, int] | None:
    """For ``OTEL_TRACES_SAMPLER`` ``traceidratio`` or ``parentbased_traceidratio``: the SDK's
    sampler, an id generator that takes a trace id from :func:`_root`, and the ratio's bound."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if name not in ("traceidratio", "parentbased_traceidratio"):
        return None
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    try:
        rate = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
    except ValueError:
        rate = 1.0
    rate = min(1.0, max(0.0, rate))
    ratio = sampling.TraceIdRatioBased(rate)
    sampler = sampling.ParentBased(ratio) if name.startswith("parentbased") else ratio

    class Preset(RandomIdGenerator):
        """Random ids, but a root's trace id drawn by :func:`_root` when it set one."""

        def __init__(self) -> None:
            self.next: int | None = None

        def generate_trace_id(self) -> int:
            found, self.next = self.next, None
            return found if found is not None else super().generate_trace_id()

    return sampler, Preset(), ratio.bound


def _root(name: str, kind: str, attributes: Mapping[str, Any] | None) -> Any:
    """A root span under a ratio sampler: the trace id drawn and judged here as the SDK's
    ``TraceIdRatioBased`` judges it (its low 64 bits under the bound). Dropped, the span is a
    ``NonRecordingSpan`` made current without the SDK (which spends about 10 µs deciding the same);
    kept, the SDK makes it with that very trace id (``Preset``) and samples it alike."""
    trace_id = random.getrandbits(128) or 1
    if _BOUND is not None and (trace_id & _LOW64) >= _BOUND:
        return _Unsampled(trace_id, random.getrandbits(64) or 1)  # not even a NonRecordingSpan
    _ROOTS.next = trace_id
    return _tracer.start_as_current_span(name, kind=_KIND[kind], attributes=_clean(attributes))


def _quiet(parent: str | None) -> bool:
    """Whether a span asked for here would record nothing: no ``parent`` given, and the current
    span belongs to a trace the sampler dropped (its children are dropped too: ``parentbased``).
    Then no span object is made at all, which is most of what a 1 % sampling costs otherwise."""
    if parent is not None:
        return False
    if _DROPPED.get() is not None:
        return True
    current = _api.get_current_span()
    return bool(current.get_span_context().is_valid and not current.is_recording())


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
    return _tracer is not None


def configure(service: str, env: Mapping[str, str] = os.environ) -> bool:
    """Start exporting spans when the environment asks for them (``OTEL_SERVICE_NAME`` wins over
    ``service``); whether tracing is on. Idempotent: a second call keeps the first provider."""
    if _tracer is not None:
        return True
    if not wanted(env):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service})
    ratio = _ratio_sampling(env)  # None: the SDK reads OTEL_TRACES_SAMPLER(_ARG) itself
    sampler, roots, bound = ratio if ratio is not None else (None, None, None)
    provider = TracerProvider(resource=resource, sampler=sampler, id_generator=roots)
    exporter = OTLPSpanExporter(endpoint=_endpoint(env))
    sizes = batching(env)  # a size left out (None): the SDK reads its OTEL_BSP_* variable
    processor = BatchSpanProcessor(
        exporter,
        max_queue_size=sizes.get("max_queue_size"),
        max_export_batch_size=sizes.get("max_export_batch_size"),
        schedule_delay_millis=sizes.get("schedule_delay_millis"),
    )
    provider.add_span_processor(processor)
    _start(provider, roots, bound, _parent_based(env))
    return True


def _parent_based(env: Mapping[str, str]) -> bool:
    return env.get("OTEL_TRACES_SAMPLER", "").strip().lower() == "parentbased_traceidratio"


# the batch processor's settings where the OTEL_BSP_* variables give none: (variable, dap's value)
_BATCHING = {
    "max_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", 16384),
    "max_export_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 2048),
    "schedule_delay_millis": ("OTEL_BSP_SCHEDULE_DELAY", 5000),
}


def batching(env: Mapping[str, str]) -> dict[str, int]:
    """Larger batches and queue than the SDK's defaults (512 of 2048, which a server sampling 100 %
    of 1,000 requests per second fills in a second and then drops spans from): fewer exports, each
    of which is an HTTP request and the resource encoded again. A variable that is set wins."""
    return {arg: value for arg, (variable, value) in _BATCHING.items() if not env.get(variable, "").strip()}


def _endpoint(env: Mapping[str, str]) -> str | None:
    """The traces URL as the OTLP/HTTP exporter derives it, from ``env`` (not only os.environ)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def shutdown() -> None:
    """Flush what is buffered and stop exporting (process exit, tests)."""
    global _tracer, _provider, _ROOTS, _BOUND, _PARENT_BASED
    provider, _provider, _tracer, _ROOTS, _BOUND = _provider, None, None, None, None
    _PARENT_BASED = False
    logs.trace_ids = None
    if provider is not None:
        provider.shutdown()


def flush(timeout_ms: int = 5000) -> None:
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def _context_of(parent: str | None) -> Any:
    if parent is None or not _TRACEPARENT.fullmatch(parent):
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT: parent})


_KINDS = ("internal", "server", "client", "producer", "consumer")


def span(
    name: str,
    *,
    kind: str = "internal",
    parent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A span around a block, current inside it; ``parent``: a ``traceparent`` to continue (a
    request's header, an outbox row's column) instead of the current span. A no-op when off."""
    if _tracer is None:
        return _NOOP
    if parent is not None and not _TRACEPARENT.fullmatch(parent):
        parent = None  # not W3C: as if none was given (the current trace, or a new one)
    dropped = _DROPPED.get()
    if parent is None:
        if dropped is not None:  # a dropped trace: nothing below its root either
            return _NOOP
        current = _api.get_current_span()
        if current.get_span_context().is_valid:
            if not current.is_recording():  # dropped by a sampler of the SDK's (not a ratio)
                return _NOOP
        elif _ROOTS is not None:  # a new trace under a ratio sampler: decided here, cheaply
            return _root(name, kind, attributes)  # type: ignore[no-any-return]
    elif _PARENT_BASED and not int(parent[53:55], 16) & 1:
        # an unsampled parent under parentbased_traceidratio: dropped here too, without the SDK
        return _Unsampled(int(parent[3:35], 16), random.getrandbits(64) or 1)
    inner = _tracer.start_as_current_span(
        name,
        context=_context_of(parent),
        kind=_KIND[kind],
        attributes=_clean(attributes),
    )
    return inner if dropped is None else _sampled_inside(inner)


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
    attaches the query logger to a connection taken inside a sampled span, and only then)."""
    return _tracer is not None and _DROPPED.get() is None and bool(_api.get_current_span().is_recording())


def recording(span: Any) -> bool:
    """Whether ``span`` (what :func:`span` yielded: ``None`` when off or dropped) records."""
    return span is not None and bool(span.is_recording())


def annotate(span: Any, **attributes: Any) -> None:
    """Attributes on ``span`` (what :func:`span` yielded: ``None`` when off)."""
    if recording(span):
        cleaned = _clean(attributes)
        if cleaned:
            span.set_attributes(cleaned)


def rename(span: Any, name: str) -> None:
    if recording(span):
        span.update_name(name)


def failed(span: Any, status: int) -> None:
    """Mark a server span as an error for a 5xx answer (a 4xx is the client's, per the semconv)."""
    if status >= 500 and recording(span):
        span.set_status(_api.Status(_api.StatusCode.ERROR))


def traceparent() -> str | None:
    """The current span's W3C ``traceparent``; ``None`` when off or outside any span."""
    if _tracer is None:
        return None
    dropped = _DROPPED.get()
    if dropped is not None:  # the sampled flag 00: whoever continues it drops it too
        return dropped.traceparent()
    context = _api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current ``traceparent`` to outgoing ``headers`` (nothing when off)."""
    found = traceparent()
    if found is not None:
        headers[TRACEPARENT] = found


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, for the log lines."""
    if _api is None:
        return None
    dropped = _DROPPED.get()
    if dropped is not None:
        return f"{dropped.trace_id:032x}", f"{dropped.span_id:016x}"
    context = _api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


# -- operations -------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def operation(verb: str) -> Callable[[F], F]:
    """A span per call of an entity verb (``operations.create`` …) whose first argument is the
    protocol-neutral ``Call``: the tenant, workspace, entity and principal as attributes. Off, the
    wrapper only tests one global and awaits the verb."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def traced(call: Any, *args: Any, **kwargs: Any) -> Any:
            if _tracer is None or _quiet(None):
                return await fn(call, *args, **kwargs)
            attributes = {
                "dap.tenant": str(call.workspace.tenant_id),
                "dap.workspace": call.workspace.slug,
                "dap.entity": call.resource.key,
                "enduser.id": call.principal.sub,
                "dap.request_id": call.request_id,
            }
            with span(f"{verb} {call.resource.key}", attributes=attributes):
                return await fn(call, *args, **kwargs)

        return traced  # type: ignore[return-value]

    return wrap


# -- SQL statements ---------------------------------------------------------------------------

_VERB = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|COPY|VACUUM|LISTEN|NOTIFY)\b", re.IGNORECASE)
_FIRST = re.compile(r"\s*(\w+)")
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|TABLE|JOIN)\s+([\w.\"]+)", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def statement_name(query: str) -> str:
    """A statement's event name: its verb and first table (``SELECT dap.outbox``), never its text's
    values (they are ``$n`` parameters anyway) nor its parameters. Cached: dap's statements are a
    few hundred constant texts (prepared), so each is read once."""
    verb = _VERB.search(query) or _FIRST.match(query)  # WITH … AS (INSERT …): the INSERT
    table = _TABLE.search(query)
    head = verb.group(1).upper() if verb else "SQL"
    return f"{head} {table.group(1)}" if table else head


def sql_logger(record: Any) -> None:
    """An asyncpg query logger (``Connection.add_query_logger``): one event per statement on the
    span that ran it, named by :func:`statement_name`, stamped when the statement started, with
    its duration (``db.duration_ms``) and, when it failed, ``error.type``. asyncpg calls it with
    ``call_soon`` from the statement's own task, so the current span is the one that ran it.

    An event, not a span of its own: a span costs its creation, its processor and above all its
    OTLP encoding (about 25 µs each in the batch processor's thread, which shares the GIL with the
    event loop); an event a small fraction of that (docs/performance.md). Attached by ``storage.db``
    to a connection taken inside a sampled span, for as long as that caller holds it: a dropped
    trace (most at 1 %) pays no logger on any statement."""
    if _tracer is None or _DROPPED.get() is not None:
        return
    current = _api.get_current_span()
    if not current.is_recording():  # no event on a dropped trace
        return
    elapsed = record.elapsed
    attributes: dict[str, Any] = {"db.duration_ms": round(elapsed * 1000.0, 3)}
    if record.exception is not None:
        attributes["error.type"] = type(record.exception).__name__
    started = time.time_ns() - int(elapsed * 1e9)
    current.add_event(statement_name(record.query), attributes, started)


@contextlib.contextmanager
def enabled_for_tests(
    exporter: Any,
    sampler: Any = None,
    env: Mapping[str, str] | None = None,
    watch: Callable[[Any], Any] | None = None,
) -> Iterator[None]:
    """Tracing on with ``exporter`` (an in-memory one) for a test; off again after it. ``env``:
    ``OTEL_TRACES_SAMPLER(_ARG)`` as :func:`configure` reads them (a ratio's early decision);
    ``watch``: wraps the SDK's sampler, which the SDK asks about every span it makes."""
    global _tracer, _provider, _api, _ROOTS, _BOUND, _PARENT_BASED
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    ratio = _ratio_sampling(env) if env is not None else None
    roots: Any = None
    bound: int | None = None
    if ratio is not None:
        sampler, roots, bound = ratio
        sampler = watch(sampler) if watch is not None else sampler
        provider = TracerProvider(sampler=sampler, id_generator=roots)
    else:
        sampler = watch(sampler or _default_sampler()) if watch is not None else sampler
        provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = (_tracer, _provider, _api, _ROOTS, _BOUND, _PARENT_BASED, logs.trace_ids)
    _start(provider, roots, bound, ratio is not None and env is not None and _parent_based(env))
    try:
        yield
    finally:
        provider.shutdown()
        _tracer, _provider, _api, _ROOTS, _BOUND, _PARENT_BASED, logs.trace_ids = saved


def _default_sampler() -> Any:
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    return ParentBased(ALWAYS_ON)
