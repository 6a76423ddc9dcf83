"""The streaming reader of events as WAL messages (``DAP_EVENTS_SOURCE=wal``, issue 46).

Why a stream: the slot's SQL functions (``wal``, ``DAP_EVENTS_SOURCE=wal-sql``) start a new
decoding context at every call, which reads the WAL again from the slot's ``restart_lsn``
(docs/performance.md). A walsender (``START_REPLICATION SLOT … LOGICAL``) keeps one decoding
context for as long as its connection lives and decodes each WAL record once.

Why a thread: asyncpg and psycopg 3 have no replication client (asyncpg never returns from
``START_REPLICATION``: it does not speak CopyBoth); psycopg2's ``LogicalReplicationConnection``
does, with libpq underneath (authentication, TLS, keepalive replies). Its calls block, so a thread
(:class:`Stream`) owns that connection: it reads pgoutput's messages, folds each transaction's
events (``wal.fold``) and queues the committed transactions (:class:`Committed`: events and end
LSN) for the event loop, waking the dispatcher when the queue was empty.

**The cursor.** The dispatcher's round (:func:`drain`) takes up to a batch of transactions and, in
one Postgres transaction, locks the cursor row (``dap.event_slots``), skips what the cursor
covers, delivers and writes the rest (``wal.settle``: the SQL reader's code) and moves the cursor.
Only after that commit is the end handed to :meth:`Stream.confirm`, which the thread sends as the
standby status update's flush position, at once (forced: psycopg2 sends a position given without
``force`` only once its 10 s status interval has passed, so a kill left up to 10 s of settled
events to be sent again); Postgres moves the slot's ``confirmed_flush_lsn`` only there, and a new
stream starts from it. So:

- killed (any process) before the commit: nothing confirmed; the next stream, here or in another
  process, resends the batch, with the same ids (settled deliveries are not repeated);
- killed between the commit and the confirmation: resent, and the cursor skips it (a round that
  only skipped, or only met other tenants' events, still counts as progress: the dispatcher's loop
  goes on while the queue holds transactions, since the stream wakes it only when the queue was
  empty; it once waited for its poll there, one batch a second: issue 46's stall);
- a round that fails in this process drops its stream (the transactions it took are gone from
  memory): the next round opens a new one from the confirmed position (:func:`drain_once`).

The walsender holds the slot while it streams: another process's ``START_REPLICATION`` fails
("replication slot … is active") and it tries again after ``RETRY`` seconds; the slot is the
leader election. The cursor's row lock stays, so that a leader whose walsender died while its
batch commits and the next one never both settle a transaction.

Transactions without events are not sent by pgoutput (Postgres 15 and later); once everything
received is confirmed, psycopg2 takes a keepalive's WAL end as the flush position, and the thread
sends it (at most every ``KEEPALIVE``), so the slot does not hold their WAL. The thread stops
reading when ``limit`` events wait in its queue (the socket then holds the walsender back).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import orjson

from dap.server.events import slots, wal
from dap.server.storage import db

log = logging.getLogger(__name__)

OPTIONS = {"proto_version": "1", "publication_names": slots.PUBLICATION, "messages": "true"}
LOCK = "SELECT lsn::text FROM dap.event_slots WHERE slot = $1 FOR UPDATE"
# seconds from one wake-up of the thread to the next at the least: waking at every message (three
# per event: begin, message, commit) cost the thread 44 µs of CPU per event, against 33 with
# this pause (in-process, under load; docs/decisions.md): what comes in the pause is read at once
GATHER = 0.004
RETRY = 1.0  # seconds before a stream that ended (the slot held by another process) is opened again
IN_USE = "55006"  # object_in_use: another walsender streams the slot
# seconds between two status updates sent for keepalives (see ``_read``): a busy walsender sends
# one whenever it catches up, and one update per 100 ms bounds what they cost
KEEPALIVE = 0.1
LIMIT = 5000  # events queued past which the thread stops reading (the socket holds the walsender)
HELD = 1.0  # seconds of a full queue (flow control) past which the wait is logged
BUSY_TOLD = 30.0  # seconds between two logs of one wait for a busy slot (a standby replica waits for ever)


def lsn_text(lsn: int) -> str:
    """Postgres's ``X/Y`` of an LSN. Pure."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


@dataclass(frozen=True)
class Committed:
    """One committed transaction's events (rewrites folded) and the end of its commit record."""

    events: list[dict[str, Any]]
    end: int


@dataclass
class Watch:
    """What a dispatcher's streams did besides reading, across reopenings: logged and counted
    (``measures.Counters.stream``), so that a stream that stalls says why. Written by the event
    loop while no stream thread runs, and by the stream's thread while it runs."""

    counter: Any = None  # ``Counters.stream`` (labels ``what``), or None
    opens: int = 0
    busy_since: float | None = None  # monotonic time of the first refused start in a row
    busy_told: float = 0.0

    def _count(self, what: str) -> None:
        if self.counter is not None:
            self.counter.labels(what).inc()

    def opened(self, slot: str) -> None:
        ctx: dict[str, Any] = {"slot": slot, "opens": self.opens + 1}
        if self.busy_since is not None:
            ctx["busy_s"] = round(time.monotonic() - self.busy_since, 3)
        self.opens, self.busy_since = self.opens + 1, None
        self._count("opened")
        log.info("events stream opened" if self.opens == 1 else "events stream reopened", extra={"ctx": ctx})

    def busy(self, slot: str, since: float) -> None:
        """A start refused (``55006``): logged at the first and then every ``BUSY_TOLD`` seconds."""
        now = time.monotonic()
        first = self.busy_since is None
        self.busy_since = since if self.busy_since is None else self.busy_since
        self._count("busy")
        if first or now - self.busy_told >= BUSY_TOLD:
            self.busy_told = now
            ctx = {"slot": slot, "waited_s": round(now - self.busy_since, 3)}
            log.info("events stream: the slot is held by another walsender; retrying", extra={"ctx": ctx})

    def ended(self, slot: str, error: BaseException | None) -> None:
        self._count("ended")
        ctx = {"slot": slot, "error": repr(error)}
        log.warning("events stream ended; opening it again", extra={"ctx": ctx})

    def held(self, slot: str, seconds: float, queued: int) -> None:
        self._count("held")
        ctx = {"slot": slot, "held_s": round(seconds, 3), "queued": queued}
        log.warning("events stream: its queue was full, reading held back", extra={"ctx": ctx})


class Stream:
    """The thread reading the slot through a walsender; ``start``, then ``take`` and ``confirm``
    from the event loop, ``close`` at the end. ``error`` says why it ended on its own."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        wake: Callable[[], None],
        limit: int | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.dsn, self.slot, self.limit = dsn, slot, limit or LIMIT
        self.watch = watch or Watch()
        self._loop = asyncio.get_running_loop()
        self._wake = wake
        self._lock = threading.Lock()
        self._queue: collections.deque[Committed] = collections.deque()
        self._queued = 0  # events in the queue
        self._confirm = 0  # the flush position to send (the end of what is settled)
        self._stop = False
        self._rd, self._wr = os.pipe()  # the event loop's nudge: a confirmation, room, or stop
        os.set_blocking(self._rd, False)
        os.set_blocking(self._wr, False)
        self.error: BaseException | None = None
        self.started = self.ended = 0.0  # monotonic times the thread started and ended
        self._thread = threading.Thread(target=self._run, name=f"dap-walstream-{slot}", daemon=True)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def waiting(self) -> bool:
        """Whether transactions wait to be taken."""
        return bool(self._queue)

    def take(self, events: int) -> list[Committed]:
        """The oldest queued transactions, about ``events`` events (at least one transaction)."""
        out: list[Committed] = []
        count = 0
        with self._lock:
            full = self._queued >= self.limit
            while self._queue and (not out or count + len(self._queue[0].events) <= events):
                taken = self._queue.popleft()
                count += len(taken.events)
                out.append(taken)
            self._queued -= count
        if full:
            self._nudge()
        return out

    def confirm(self, end: int) -> None:
        """Everything up to ``end`` is settled: the thread sends it as the flush position."""
        with self._lock:
            self._confirm = max(self._confirm, end)
        self._nudge()

    async def close(self) -> None:
        self._stop = True
        self._nudge()
        await asyncio.to_thread(self._thread.join, 10)
        for fd in (self._rd, self._wr):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _nudge(self) -> None:
        with contextlib.suppress(OSError):  # full (a nudge is pending anyway) or closed
            os.write(self._wr, b".")

    def _hand(self, committed: Committed) -> None:
        with self._lock:
            was_empty = not self._queue
            self._queue.append(committed)
            self._queued += len(committed.events)
        if was_empty:  # a non-empty queue has a wake pending or a round running that sees it
            self._loop.call_soon_threadsafe(self._wake)

    def _run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # the thread's end, read by the event loop
            self.error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed
                self._loop.call_soon_threadsafe(self._wake)
        finally:
            self.ended = time.monotonic()

    def _read(self) -> None:
        import psycopg2.extras  # only where a stream runs

        conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            cur = conn.cursor()
            cur.start_replication(slot_name=self.slot, decode=False, options=OPTIONS)
            self.watch.opened(self.slot)
            pending: list[dict[str, Any]] = []
            sent, woke, fresh = 0, 0.0, False
            handed, seen = 0, 0  # the end of the last transaction handed, the server's WAL end
            told, owed = 0.0, False  # when the last keepalive's update went, whether one is due
            held: float | None = None  # monotonic time the queue became full
            while not self._stop:
                with self._lock:
                    target, full = self._confirm, self._queued >= self.limit
                if full != (held is not None):  # flow control began or ended: rare, timed
                    now = time.monotonic()
                    if held is not None and now - held > HELD:
                        self.watch.held(self.slot, now - held, self._queued)
                    held = now if full else None
                if target > sent:  # forced: psycopg2 would otherwise send it after 10 s only
                    cur.send_feedback(flush_lsn=target, force=True)
                    sent = target
                message = None if full else cur.read_message()
                if message is None and not full and cur.wal_end > seen:
                    # a keepalive came: psycopg2 moved its flush position to the server's WAL end
                    # if everything received was confirmed (WAL without events since), but sends
                    # it only at its 10 s status interval: sent here, so that WAL is released
                    seen, owed = cur.wal_end, True
                if owed and sent >= handed and time.monotonic() >= told + KEEPALIVE:
                    cur.send_feedback(force=True)
                    told, owed = time.monotonic(), False
                if message is None and fresh:  # read all there was: what comes in the pause next
                    fresh = False
                    time.sleep(max(0.0, woke + GATHER - time.monotonic()))
                    continue
                if message is None:  # nothing to read now (or no room): wait for either side
                    select.select(
                        [self._rd] if full else [cur, self._rd], [], [], KEEPALIVE if owed else 10.0
                    )
                    woke = time.monotonic()
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._rd, 4096)
                    continue
                fresh = True
                data = message.payload
                kind = data[0:1]
                if kind == b"M":
                    found = wal.message(data)
                    if found is not None and found[0] == wal.PREFIX:
                        wal.fold(pending, orjson.loads(found[1]))
                elif kind == b"C":
                    if pending:  # the commit's XLogData starts at the commit record's end
                        self._hand(Committed(pending, message.data_start))
                        handed = message.data_start
                    pending = []
                elif kind == b"B":
                    pending = []
        finally:
            conn.close()


async def drain(
    dispatcher: wal.Reader, conn: db.Connection, stream: Stream, slot: str, batch: int
) -> tuple[int, bool, int | None]:
    """One round in the caller's transaction (see the module): (events read, whether more wait,
    the end to confirm once the caller committed)."""
    taken = stream.take(batch)
    if not taken:
        return 0, False, None
    cursor = await conn.fetchval(LOCK, slot)
    if cursor is None:
        raise RuntimeError(f"no cursor row for the events slot {slot}: it was not ensured at boot")
    floor = wal.lsn_value(cursor)
    fresh = [c for c in taken if c.end > floor]  # the rest: settled before a kill, sent again
    count = await wal.settle(dispatcher, conn, [b for c in fresh for b in c.events])
    if fresh:
        await conn.execute(wal.MOVE, slot, lsn_text(fresh[-1].end))
    return count, stream.waiting, taken[-1].end


class Streamer(wal.Reader, Protocol):
    """What :func:`drain_once` needs of the dispatcher."""

    pool: asyncpg.Pool
    dsn: str
    stream: Stream | None
    watch: Watch

    def arrived(self) -> None: ...


async def drain_once(dispatcher: Streamer, slot: str, batch: int) -> tuple[int, bool]:
    """A round of the dispatcher's stream, opened (again) first when it has none or it ended;
    (events read, whether more wait). A round that fails drops the stream (see the module)."""
    stream = dispatcher.stream
    if stream is not None and not stream.alive:
        if time.monotonic() < stream.ended + RETRY:
            return 0, False
        if getattr(stream.error, "pgcode", None) == IN_USE:
            dispatcher.watch.busy(slot, stream.started)
        else:
            dispatcher.watch.ended(slot, stream.error)
        await stream.close()
        dispatcher.stream = stream = None
    if stream is None:
        stream = dispatcher.stream = Stream(dispatcher.dsn, slot, dispatcher.arrived, watch=dispatcher.watch)
        stream.start()
    if not stream.waiting:
        return 0, False
    try:
        async with db.connection(dispatcher.pool) as conn, db.committed(conn):
            read, more, last = await drain(dispatcher, conn, stream, slot, batch)
    except BaseException:
        dispatcher.stream = None
        await stream.close()
        raise
    if last is not None:
        stream.confirm(last)
    return read, more
