"""The spans dap records: plain ``__slots__`` objects, current in one ``ContextVar``.

A sampled span is a :class:`Span`: ids (ints), name, kind, start and end (``time.time_ns``), a
dict of attributes, a list of events as tuples, an error description. Entering it makes it
current; leaving it stamps the end and hands its :data:`Record` (a tuple of those values) to
:data:`sink` (the exporter's queue, or a test's converter). Nothing else happens per span: no
processor chain, no bounded attribute dicts, no OpenTelemetry context object, which is what the
SDK's span cost (about 50 µs for a write's two spans and two statement events,
docs/performance.md). Encoding to OTLP happens later, in bulk
(``dap.tracing.otlp``).

A trace the sampler dropped is an :class:`Unsampled`: its trace id and this process's span id,
current like a span, so a child knows to make nothing and a ``traceparent`` still goes out with
the sampled flag ``00``.
"""

from __future__ import annotations

import contextvars
import logging
import traceback
from collections.abc import Callable
from time import time_ns
from typing import Any

log = logging.getLogger("dap.tracing")

KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}  # OTLP SpanKind

Event = tuple[int, str, dict[str, Any]]  # (time in ns since the epoch, name, attributes)

# An ended span as it leaves the process: (name, kind, trace id, span id, parent id, remote, start,
# end, attributes, events, error). Plain values only, so ``marshal`` writes each one in C. Made
# by :meth:`Span.__exit__` and handed to :data:`sink`.
Record = tuple[str, str, int, int, int, bool, int, int, dict[str, Any], list[Event], "str | None"]


class Span:
    """A sampled span. ``parent_id`` 0: a root; ``remote``: the parent came from another process
    (a ``traceparent``). ``error``: ``None`` while the status is unset, else its description."""

    __slots__ = (
        "_token",
        "attributes",
        "end",
        "error",
        "events",
        "kind",
        "name",
        "parent_id",
        "remote",
        "span_id",
        "start",
        "trace_id",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        trace_id: int,
        span_id: int,
        parent_id: int,
        remote: bool,
        attributes: dict[str, Any] | None,
    ) -> None:
        self.name, self.kind = name, kind
        self.trace_id, self.span_id, self.parent_id, self.remote = trace_id, span_id, parent_id, remote
        self.attributes: dict[str, Any] = attributes if attributes is not None else {}
        self.events: list[Event] = []
        self.error: str | None = None
        self.end = 0
        self.start = time_ns()
        if watch is not None:
            watch(self)

    def __enter__(self) -> Span:
        self._token = CURRENT.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and isinstance(exc, Exception):  # as the SDK records one (not a cancellation)
            self.error = f"{type(exc).__name__}: {exc}"
            self.events.append(
                (
                    time_ns(),
                    "exception",
                    {
                        "exception.type": type(exc).__name__,
                        "exception.message": str(exc),
                        "exception.stacktrace": "".join(traceback.format_exception(exc)),
                        "exception.escaped": "False",
                    },
                )
            )
        self.end = end = time_ns()
        _reset(self._token)
        # the token holds the task's whole Context, and a span may outlive its block (a caller's
        # reference): it must not keep that Context alive
        del self._token
        sink(
            (
                self.name,
                self.kind,
                self.trace_id,
                self.span_id,
                self.parent_id,
                self.remote,
                self.start,
                end,
                self.attributes,
                self.events,  # ended: nothing appends to it any more
                self.error,
            )
        )

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"


class Unsampled:
    """A trace the sampler dropped, current for a block: its trace id and this process's span id.
    Children make nothing; :meth:`traceparent` carries the sampled flag ``00`` onward."""

    __slots__ = ("_token", "span_id", "trace_id")

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def __enter__(self) -> None:
        self._token = CURRENT.set(self)

    def __exit__(self, *_: object) -> None:
        _reset(self._token)

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-00"


CURRENT: contextvars.ContextVar[Span | Unsampled | None] = contextvars.ContextVar("dap_span", default=None)


def _reset(token: contextvars.Token[Span | Unsampled | None]) -> None:
    """The current span as it was before the block; a block left in another context than it was
    entered in (a generator finished elsewhere) cannot restore it and must not fail the caller for
    it: the SDK's ``detach`` logs the same case and goes on."""
    try:
        CURRENT.reset(token)
    except ValueError:
        log.debug("tracing: a span ended in another context than it began in")


def _nowhere(record: Record) -> None:
    """The sink while tracing is off (a span left open across :func:`dap.tracing.shutdown`)."""


sink: Callable[[Record], None] = _nowhere  # set by dap.tracing while on
watch: Callable[[Span], Any] | None = None  # a test's counter of the spans made


def readable(record: Record, resource: Any) -> Any:
    """``record`` as the SDK's ``ReadableSpan``, for a test's in-memory exporter: the same names,
    ids, parent, attributes, events and status the OTLP encoding carries."""
    from opentelemetry.sdk.trace import Event as SdkEvent
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    name, kind, trace_id, span_id, parent_id, remote, start, end, attributes, events, error = record
    context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))
    parent = (
        SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=TraceFlags(1)) if parent_id else None
    )
    status = Status(StatusCode.UNSET) if error is None else Status(StatusCode.ERROR, error or None)
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=dict(attributes),
        events=[SdkEvent(at_name, dict(at_attributes), at) for at, at_name, at_attributes in events],
        kind=SpanKind(KINDS[kind] - 1),
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=InstrumentationScope("dap"),
    )
