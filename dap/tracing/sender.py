"""The sending process: the records a traced process writes on its stdin, sent as OTLP/HTTP batches.

    python -P -m dap.tracing.sender [--endpoint URL] [--batch N] [--delay MS] [--log-level LEVEL]

Started by ``dap.tracing.exporting`` (never by hand): its stdin carries frames (a kind byte, the
payload's length in 4 bytes little-endian, the payload): ``R`` the resource's attributes and
``S`` a list of records (``spans.Record``), both ``marshal``-ed, and ``F`` a flush, answered with
one ``F`` byte on stdout once everything before it was sent. A request goes out when ``--batch``
spans wait or ``--delay`` milliseconds after the oldest waiting one arrived; it is encoded by
``dap.tracing.otlp`` and sent by the OTLP/HTTP exporter's client, which reads every
``OTEL_EXPORTER_OTLP_*`` variable (headers, compression, timeout, certificates) and retries as
the SDK does. At the end of its stdin (the traced process exited or died) it sends what it has
and ends.
"""

from __future__ import annotations

import argparse
import gc
import logging
import marshal
import os
import select
import signal
import sys
import time
from collections.abc import Callable

from dap import logs
from dap.tracing import exporting, otlp, spans

log = logging.getLogger("dap.tracing")

Send = Callable[[bytes], bool]


class Reader:
    """The frames a file descriptor carries (see the module)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer, self.ended = fd, bytearray(), False

    def next(self, timeout: float | None) -> tuple[bytes, bytes] | None:
        """The next frame as ``(kind, payload)``; ``None`` when none came within ``timeout``
        seconds (``None``: no limit) or the input ended (then :attr:`ended`)."""
        while True:
            buffer = self.buffer
            if len(buffer) >= exporting.HEAD:
                end = exporting.HEAD + int.from_bytes(buffer[1 : exporting.HEAD], "little")
                if len(buffer) >= end:
                    kind, payload = bytes(buffer[:1]), bytes(buffer[exporting.HEAD : end])
                    del buffer[:end]
                    return kind, payload
            if self.ended:
                return None
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return None
            data = os.read(self.fd, 1 << 20)
            if not data:
                self.ended = True
                return None
            buffer += data


def serve(fd: int, answer: int, send: Send, batch: int, delay: float) -> None:
    """Read frames from ``fd`` until its end, sending whole batches and late ones (see the module);
    ``answer``: where a flush is acknowledged."""
    resource = otlp.resource({})
    waiting: list[spans.Record] = []
    oldest = 0.0  # when the oldest waiting span arrived

    def export(records: list[spans.Record]) -> None:
        try:
            data = otlp.request(resource, "dap", records)
        except Exception:  # a span that cannot be encoded must not stop the export
            log.exception("tracing: a batch of %d spans could not be encoded", len(records))
            return
        if not send(data):
            log.warning("tracing: a batch of %d spans was not accepted", len(records))

    reader = Reader(fd)
    while True:
        got = reader.next(None if not waiting else max(0.0, oldest + delay - time.monotonic()))
        if got is None:
            if reader.ended:
                break
            export(waiting)  # the delay passed
            waiting = []
            continue
        kind, payload = got
        if kind == exporting.SPANS:
            try:
                records = marshal.loads(payload)
            except (EOFError, ValueError, TypeError):  # not what the exporter writes: skipped
                log.exception("tracing: a frame of %d bytes could not be read", len(payload))
                continue
            if not waiting:
                oldest = time.monotonic()
            waiting += records
            while len(waiting) >= batch:
                export(waiting[:batch])
                del waiting[:batch]
                oldest = time.monotonic()
        elif kind == exporting.RESOURCE:
            resource = otlp.resource(marshal.loads(payload))
        elif kind == exporting.FLUSH:
            if waiting:
                export(waiting)
                waiting = []
            os.write(answer, exporting.FLUSH)
    if waiting:
        export(waiting)


def client(endpoint: str | None) -> tuple[Send, Callable[[], None]]:
    """A function that POSTs encoded bytes with the OTLP/HTTP exporter's client (which reads the
    ``OTEL_EXPORTER_OTLP_*`` variables), and one that closes it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=endpoint)
    found = getattr(exporter, "_client", None)
    if found is None or not callable(getattr(found, "export", None)):  # fail at start, not silently
        raise RuntimeError("dap needs opentelemetry-exporter-otlp-proto-http >= 1.45 (_client.export)")

    def send(data: bytes) -> bool:
        return bool(found.export(data).success)

    return send, exporter.shutdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dap.tracing.sender", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--delay", type=int, default=5000, help="milliseconds")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    # its life is its stdin's: a terminal's ^C (or a supervisor's SIGTERM to the whole group)
    # reaches this process too, and the traced process decides; its exit (the end of stdin) ends
    # this one after the last send
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    level = args.log_level.lower()
    os.environ.pop("DAP_LOGS_FILE", None)  # the traced process's files: one writer each
    logs.configure({"warning": "warn", "critical": "error"}.get(level, level))
    send, close = client(args.endpoint)
    # what was imported lives as long as the process: out of the collector's sight, a collection
    # during a batch's ``marshal.loads`` scans only the batch (collections of the whole heap took
    # the reading of a span from 1.6 to 3.6 µs)
    gc.collect()
    gc.freeze()
    try:
        serve(sys.stdin.fileno(), sys.stdout.fileno(), send, max(1, args.batch), args.delay / 1000.0)
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
