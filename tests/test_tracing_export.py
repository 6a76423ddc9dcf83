"""The export of spans (dap/tracing/exporting.py, sender.py): the traced process writes records to a
real sending process, which sends OTLP/HTTP to a receiver on loopback, decoded with the protobuf
schema. What a flush returns has been received; a child that dies is replaced; a child that
stops reading costs the traced process dropped spans, never a blocked write; the sender batches
by size, by delay and at its end."""

from __future__ import annotations

import logging
import marshal
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dap import tracing
from dap.tracing import exporting, sender, spans


class Receiver:
    """An OTLP/HTTP receiver on loopback (a thread): every request's spans, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                message = ExportTraceServiceRequest()
                message.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                received.append(message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def names(self) -> list[str]:
        scopes = [c for m in self.requests for r in m.resource_spans for c in r.scope_spans]
        return [s.name for c in scopes for s in c.spans]

    def services(self) -> set[str]:
        return {
            a.value.string_value
            for m in self.requests
            for r in m.resource_spans
            for a in r.resource.attributes
            if a.key == "service.name"
        }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


def ended(names: list[str], attributes: dict[str, Any] | None = None) -> list[spans.Record]:
    kept: list[spans.Record] = []
    with tracing.recording_into(kept.append):
        for name in names:
            with tracing.span(name, attributes=attributes):
                pass
    return kept


def exporter(spawn: exporting.Spawn, **sizes: int) -> exporting.Exporter:
    settings = {"max_queue_size": 1000, "schedule_delay_millis": 60_000, "chunk": 1, **sizes}
    return exporting.Exporter(spawn, {"service.name": "export-test"}, **settings)


def test_a_flush_returns_when_the_receiver_has_every_span(receiver: Receiver) -> None:
    names = [f"s{n}" for n in range(7)]
    sent = exporter(exporting.spawner(receiver.url, 2048, 60_000), chunk=1 << 20)
    try:
        for s in ended(names):
            sent.put(s)  # no chunk is full: they wait in the traced process
        assert sent.queued == 7 and not sent._waiting
        assert sent.flush(10.0)
        assert receiver.names() == names and receiver.services() == {"export-test"}
        assert len(receiver.requests) == 1  # the sender waited for its batch: one request
        (last,) = ended(["last"])
        sent.put(last)
    finally:
        sent.shutdown()
    assert receiver.names() == [*names, "last"]  # the shutdown's: queued, written, sent, ended


def test_a_sender_that_died_is_started_again(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporting, "RESPAWN", 0.0)
    sent = exporter(exporting.spawner(receiver.url, 2048, 60_000))
    try:
        first = sent._child
        assert first is not None
        first.kill()
        first.wait()
        names = [f"after{n}" for n in range(6)]
        for s in ended(names):
            sent.put(s)  # a frame each: the first meets the dead pipe, and goes to the next child
        assert sent.flush(10.0)
        assert sent._child is not first
        assert receiver.names() == names
    finally:
        sent.shutdown()


def test_a_sender_that_stops_reading_costs_dropped_spans_never_a_blocked_put(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def stuck() -> subprocess.Popen[bytes]:  # a child that never reads its stdin
        return subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    big = {"blob": "x" * 20_000}  # a frame each: the pipe's 1 MB is full after about 50
    sent = exporter(stuck, max_queue_size=30)
    try:
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="dap.tracing"):
            for s in ended([f"s{n}" for n in range(300)], big):
                sent.put(s)
        assert time.monotonic() - began < 5.0
        assert 0 < sent._waiting_spans <= 30
        assert "spans dropped" in caplog.text
        began = time.monotonic()
        assert not sent.flush(0.5)  # nothing reads: not sent, and said so in time
        assert time.monotonic() - began < 2.0
    finally:
        child = sent._child
        sent.shutdown(timeout=1.0)
    assert child is not None and child.poll() is not None  # killed: it did not end by itself


def write(fd: int, kind: bytes, payload: Any = None) -> None:
    if kind == exporting.SPANS:
        data = marshal.dumps(payload, 2)
    else:
        data = b"" if payload is None else marshal.dumps(payload)
    os.write(fd, exporting.frame(kind, data))


def test_the_sender_sends_whole_batches_then_on_a_flush_then_at_its_end() -> None:
    records = ended([f"s{n}" for n in range(8)])
    requests: list[list[str]] = []

    def send(data: bytes) -> bool:
        message = ExportTraceServiceRequest()
        message.ParseFromString(data)
        requests.append([s.name for s in message.resource_spans[0].scope_spans[0].spans])
        return True

    read, write_end = os.pipe()
    answer_read, answer = os.pipe()
    serving = threading.Thread(target=sender.serve, args=(read, answer, send, 4, 60.0))
    serving.start()
    try:
        write(write_end, exporting.RESOURCE, {"service.name": "x"})
        write(write_end, exporting.SPANS, records[:3])
        write(write_end, exporting.SPANS, records[3:6])  # 6 waiting: a batch of 4 goes
        write(write_end, exporting.FLUSH)
        assert os.read(answer_read, 1) == exporting.FLUSH
        assert requests == [["s0", "s1", "s2", "s3"], ["s4", "s5"]]
        write(write_end, exporting.SPANS, records[6:])
    finally:
        os.close(write_end)
        serving.join(10.0)
    assert not serving.is_alive() and requests[-1] == ["s6", "s7"]  # sent at the end of its input
    os.close(read)
    os.close(answer_read)
    os.close(answer)


def test_the_sender_sends_what_waits_once_the_delay_has_passed() -> None:
    records = ended(["late0", "late1"])
    sent = threading.Event()

    def send(data: bytes) -> bool:
        sent.set()
        return True

    read, write_end = os.pipe()
    serving = threading.Thread(target=sender.serve, args=(read, write_end, send, 2048, 0.1))
    serving.start()
    try:
        write(write_end, exporting.SPANS, records)
        assert sent.wait(5.0)  # no batch filled, no flush: the delay sent it
    finally:
        os.close(write_end)
        serving.join(10.0)
    os.close(read)


def test_a_span_with_a_value_that_cannot_be_sent_is_dropped_and_the_caller_goes_on(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    odd, fine = ended(["odd", "fine"])
    odd[8]["dap.odd"] = object()  # its attributes, set past span()'s cleaning (which makes such values text)
    sent = exporter(exporting.spawner(receiver.url, 2048, 60_000), chunk=1 << 20)
    try:
        with caplog.at_level(logging.WARNING, logger="dap.tracing"):
            sent.put(odd)
            sent.put(fine)
        assert "'odd' has a value that cannot be sent" in caplog.text
        assert sent.queued == 1 and sent.flush(10.0)
    finally:
        sent.shutdown()
    assert receiver.names() == ["fine"]


def test_the_sender_skips_a_frame_it_cannot_read_and_goes_on() -> None:
    records = ended(["kept"])
    sent: list[bytes] = []

    def send(data: bytes) -> bool:
        sent.append(data)
        return True

    read, write_end = os.pipe()
    serving = threading.Thread(target=sender.serve, args=(read, write_end, send, 100, 60.0))
    serving.start()
    try:
        broken = b"[\x05\x00\x00\x00\xfe"  # a list of 5 records, the first of no known type
        os.write(write_end, exporting.frame(exporting.SPANS, broken))
        write(write_end, exporting.SPANS, records)
    finally:
        os.close(write_end)
        serving.join(10.0)
    os.close(read)
    assert not serving.is_alive() and len(sent) == 1  # the good frame, sent at the end of its input
    message = ExportTraceServiceRequest()
    message.ParseFromString(sent[0])
    assert [s.name for s in message.resource_spans[0].scope_spans[0].spans] == ["kept"]
