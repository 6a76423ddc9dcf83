"""Export: ended spans leave the traced process as plain records, for a sending process to encode.

Encoding OTLP and sending it over HTTP are about 25 µs of CPU per sampled find, and done by a
thread of the traced process they cost it more than that: the thread shares the GIL with the event
loop, and every system call of the loop (a socket's send) let the thread take the GIL for up to a
switch interval, about +30 µs per sampled find spent waiting in the loop's sends
(docs/performance.md, "Tracing's export in a process of its own"). So the traced process keeps
only records (``spans.Record``: tuples of plain values), each ``marshal``-ed as its span ends
(C, while the span is still in the CPU's caches: about 1 µs; a chunk ``marshal``-ed at once later
was no cheaper in the server, and keeps the records for the collector to scan), and writes every
:data:`CHUNK` of them as one frame to the stdin of a child process (``dap.tracing.sender``),
which batches, encodes and sends with the OTLP/HTTP exporter's own client, so the endpoint,
headers, compression, timeout, certificates and retries follow the standard
``OTEL_EXPORTER_OTLP_*`` variables exactly as before.

The frame is written by the thread that filled the chunk (the event loop's), and never blocks: the
pipe is non-blocking, a frame it cannot take waits with those after it, and the spans beyond
``max_queue_size`` waiting are dropped and counted (a warning at most every :data:`SAID` seconds),
as the SDK's batch processor drops them. A thread
wakes every ``schedule_delay_millis`` to write what is queued (a quiet process's last spans). The
child ends with its stdin: when the traced process exits (or dies) it sends what it has and stops.
A child that died is started again at the next write, at most once per :data:`RESPAWN` seconds.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import marshal
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from dap.tracing import spans

log = logging.getLogger("dap.tracing")

CHUNK = 192  # records per frame (about 64 KB): one write per chunk
RESPAWN = 10.0  # seconds between two starts of a child that keeps dying
SAID = 10.0  # seconds between two warnings of dropped spans
PIPE_SIZE = 1 << 20  # the pipe's buffer (Linux's default limit for an unprivileged process)

# frames on the child's stdin: a kind byte, the payload's length (4 bytes, little-endian), the
# payload. ``SPANS``'s is a ``marshal``-ed list of records, made of records ``marshal``-ed one by
# one: version 2 writes a list as ``[``, its length (4 bytes, little-endian) and its items, and
# an item without references to others, so the sender reads the whole frame in one C call
RESOURCE, SPANS, FLUSH = b"R", b"S", b"F"
HEAD = 5
LIST = 5  # a marshal-ed list's head

Spawn = Callable[[], "subprocess.Popen[bytes]"]


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + len(payload).to_bytes(4, "little") + payload


class Exporter:
    """The traced process's side: :meth:`put` is ``spans.sink``; ``spawn`` starts the sender."""

    def __init__(
        self,
        spawn: Spawn,
        resource: Mapping[str, Any],
        *,
        max_queue_size: int,
        schedule_delay_millis: int,
        chunk: int = CHUNK,
    ) -> None:
        self._spawn, self._resource = spawn, frame(RESOURCE, marshal.dumps(dict(resource)))
        # the records not yet framed, each ``marshal``-ed, joined once per frame (a bytearray grown
        # record by record copied itself about every tenth one). Always this one list: a put
        # appends without the lock (one call, atomic), a frame takes the first n and deletes them
        self._queued: list[bytes] = []
        self.limit, self.chunk = max_queue_size, chunk
        self.delay = schedule_delay_millis / 1000.0
        self.dropped = 0  # spans dropped since the last warning
        self._said = -SAID  # when that warning was given (time.monotonic)
        # frames the pipe has not taken yet, each with its number of spans; the first may be half
        # written (``_begun``): a new child must not get its rest
        self._waiting: collections.deque[tuple[memoryview, int]] = collections.deque()
        self._waiting_spans = 0
        self._begun = False
        self._child: subprocess.Popen[bytes] | None = None
        self._started = -RESPAWN  # when the last child was started (time.monotonic)
        self._lock = threading.Lock()  # frames and writes: the loop's, the timer thread's, a flush's
        self._stopped = threading.Event()
        with self._lock:  # at start, not in a request: a fork and exec block their thread
            self._pipe()
            self._write()  # the resource
        self._thread = threading.Thread(target=self._run, name="dap-otlp-export", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """How many spans wait for their frame."""
        return len(self._queued)

    def put(self, record: spans.Record) -> None:
        try:
            data = marshal.dumps(record, 2)  # 2: no table of shared objects to build
        except ValueError:  # a value marshal cannot write: the span is lost, never the request
            log.warning("tracing: span %r has a value that cannot be sent; dropped", record[0])
            return
        queued = self._queued
        queued.append(data)
        if len(queued) >= self.chunk:
            self.ship()

    def ship(self) -> None:
        """Write what is queued as a frame, after the frames still waiting, as far as the pipe takes."""
        with self._lock:
            self._frame_queued()
            self._write()
            if self.dropped and time.monotonic() - self._said >= SAID:
                log.warning("tracing: the span queue was full, %d spans dropped", self.dropped)
                self.dropped, self._said = 0, time.monotonic()

    def _frame_queued(self) -> None:
        queued = self._queued
        n = len(queued)
        if not n:
            return
        records = queued[:n]  # what another thread appends meanwhile stays, after them
        del queued[:n]
        if self._waiting_spans + n > self.limit:
            self.dropped += n
            return
        size = sum(map(len, records)) + LIST
        head = SPANS + size.to_bytes(4, "little") + b"[" + n.to_bytes(4, "little")
        self._waiting.append((memoryview(b"".join([head, *records])), n))  # one copy of the records
        self._waiting_spans += n

    def _write(self) -> None:
        waiting = self._waiting
        while waiting:
            fd = self._pipe()
            if fd is None:  # no child now (one keeps dying): what waits is dropped
                self._drop_waiting()
                return
            data, n = waiting[0]
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                return
            except OSError as exc:  # the child is gone (EPIPE): what it had not read is lost
                log.warning("tracing: the sending process ended (%s); starting another", exc)
                self._lost()
                continue
            if written < len(data):
                waiting[0], self._begun = (data[written:], n), True
                return
            waiting.popleft()
            self._waiting_spans -= n
            self._begun = False

    def _pipe(self) -> int | None:
        """The child's stdin, a child started (and sent the resource) first if there is none."""
        child = self._child
        if child is not None and child.stdin is not None:
            return child.stdin.fileno()
        if time.monotonic() - self._started < RESPAWN:
            return None
        self._started = time.monotonic()
        try:
            child = self._spawn()
        except OSError as exc:
            log.error("tracing: the sending process could not be started: %s", exc)
            return None
        assert child.stdin is not None
        fd = child.stdin.fileno()
        resize = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux's; elsewhere the pipe stays as it is
        if resize is not None:
            with contextlib.suppress(OSError):  # above the system's limit: 64 KB does, with more waits
                fcntl.fcntl(fd, resize, PIPE_SIZE)
        os.set_blocking(fd, False)
        self._child = child
        self._waiting.appendleft((memoryview(self._resource), 0))
        return fd

    def _lost(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            _close(child)
        if self._begun:  # its rest would corrupt the next child's stream
            _, n = self._waiting.popleft()
            self._waiting_spans -= n
            self.dropped += n
            self._begun = False

    def _drop_waiting(self) -> None:
        self.dropped += self._waiting_spans
        self._waiting.clear()
        self._waiting_spans, self._begun = 0, False

    def _run(self) -> None:
        while not self._stopped.wait(self.delay):
            self.ship()

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything queued and wait until the child has sent it (a short-lived process
        before it exits); whether that happened within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._frame_queued()
            self._waiting.append((memoryview(frame(FLUSH)), 0))
            if not self._written_by(deadline):
                return False
            child = self._child
            if child is None or child.stdout is None:
                return False
            answered, _, _ = select.select([child.stdout], [], [], max(0.0, deadline - time.monotonic()))
            return bool(answered) and os.read(child.stdout.fileno(), 1) == FLUSH

    def _written_by(self, deadline: float) -> bool:
        while True:
            self._write()
            child = self._child
            if not self._waiting:
                return True
            left = deadline - time.monotonic()
            if child is None or child.stdin is None or left <= 0:
                return False
            select.select([], [child.stdin], [], left)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Write what is queued, let the child send it and end (its stdin closed); stop the thread."""
        self._stopped.set()
        self._thread.join(timeout=timeout)
        deadline = time.monotonic() + timeout
        with self._lock:
            self._frame_queued()
            self._written_by(deadline)
            if self._waiting_spans:
                log.warning("tracing: %d spans not sent at shutdown", self._waiting_spans)
            child, self._child = self._child, None
        if child is not None:
            _close(child, max(0.0, deadline - time.monotonic()))


def _close(child: subprocess.Popen[bytes], timeout: float = 0.0) -> None:
    """Close ``child``'s stdin (it sends what it has and ends) and reap it within ``timeout``."""
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("tracing: the sending process did not end within %.0f s; killed", timeout)
        child.kill()
        child.wait()


def spawner(endpoint: str | None, batch: int, delay_millis: int) -> Spawn:
    """How the traced process starts its sender: this interpreter, ``-P`` (the working directory
    is not put first on ``sys.path``: the ``dap`` package is the one this process runs), the same
    environment (the ``OTEL_EXPORTER_OTLP_*`` variables), stderr shared (its log lines go where
    the process's go)."""
    command = [sys.executable, "-P", "-m", "dap.tracing.sender", "--batch", str(batch)]
    command += ["--delay", str(delay_millis), "--log-level", logging.getLevelName(log.getEffectiveLevel())]
    if endpoint:
        command += ["--endpoint", endpoint]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    return spawn
