"""Export: ended spans queued by the event loop, encoded and sent by one thread in large batches.

The event loop's share per span is a ``deque.append`` and a length test (:meth:`Exporter.put`);
the thread wakes when a batch is full or every ``schedule_delay_millis`` (the ``OTEL_BSP_*``
variables, as the SDK's batch processor reads them), not per span. It encodes with
``dap.tracing.otlp`` and sends with the OTLP/HTTP exporter's own client, so the endpoint, headers,
compression, timeout, certificates and retries follow the standard ``OTEL_EXPORTER_OTLP_*``
variables exactly as before. A full queue drops the newest spans and counts them, as the SDK does.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dap.tracing import otlp, spans

log = logging.getLogger("dap.tracing")

Send = Callable[[bytes], bool]


class Exporter:
    """The queue between the loop and the sending thread; :meth:`put` is ``spans.sink``."""

    def __init__(
        self,
        send: Send,
        resource: Mapping[str, Any],
        *,
        max_queue_size: int,
        max_export_batch_size: int,
        schedule_delay_millis: int,
    ) -> None:
        self.send, self.resource = send, otlp.resource(resource)
        self.queue: collections.deque[spans.Span] = collections.deque()
        self.limit, self.batch = max_queue_size, max_export_batch_size
        self.delay = schedule_delay_millis / 1000.0
        self.dropped = 0
        self._wake = threading.Event()
        self._sending = threading.Lock()  # the thread's drain and a flush from another thread
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="dap-otlp-export", daemon=True)
        self._thread.start()

    def put(self, span: spans.Span) -> None:
        queue = self.queue
        if len(queue) >= self.limit:
            self.dropped += 1
            return
        queue.append(span)
        if len(queue) >= self.batch and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            full = self._wake.wait(self.delay)  # True: put saw a full batch; False: the delay
            self._wake.clear()
            self.drain(full_only=full)

    def drain(self, full_only: bool = False) -> None:
        """Send what is queued now, a batch per request; ``full_only``: only whole batches.

        Spans that end while a batch is encoded and sent wait for the next wake. Sending until the
        queue was empty never ended under load: every send let a few dozen spans in, so the thread
        sent one small batch after another (34 requests a second of about 55 spans each, at 1.6 ms
        of CPU per request whatever its size, against 3 of 2,048), which cost a sampled find about
        28 µs of the server's CPU (docs/performance.md, "Tracing's cost on the cheapest request")."""
        with self._sending:
            queue = self.queue
            left = len(queue)
            while left and (left >= self.batch or not full_only):
                size = min(self.batch, left)
                batch = [queue.popleft() for _ in range(size)]
                left -= size
                try:
                    data = otlp.request(self.resource, "dap", batch)
                except Exception:  # a span that cannot be encoded must not stop the export
                    log.exception("tracing: a batch of %d spans could not be encoded", len(batch))
                    continue
                if not self.send(data):
                    log.warning("tracing: a batch of %d spans was not accepted", len(batch))
            if self.dropped:
                log.warning("tracing: the span queue was full, %d spans dropped", self.dropped)
                self.dropped = 0

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10.0)
        self.drain()


def sender(endpoint: str | None) -> tuple[Send, Callable[[], None]]:
    """A function that POSTs encoded bytes with the OTLP/HTTP exporter's client (which reads the
    ``OTEL_EXPORTER_OTLP_*`` variables), and one that closes it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=endpoint)
    client = getattr(exporter, "_client", None)
    if client is None or not callable(getattr(client, "export", None)):  # fail at start, not silently
        raise RuntimeError("dap needs opentelemetry-exporter-otlp-proto-http >= 1.45 (_client.export)")

    def send(data: bytes) -> bool:
        return bool(client.export(data).success)

    return send, exporter.shutdown
