"""The feed: delivered events in commit order (``seq``), fanned out to this process's subscribers.

Every process runs one :class:`Feed`. A dedicated connection ``LISTEN``s on ``dap_feed`` (the
dispatcher of any process NOTIFYs it when it delivers rows); the feed then reads the rows after
the last ``seq`` it has seen, once for all its subscribers, and offers each to every
:class:`Subscriber` -- so fan-out crosses processes through Postgres, never process memory.

A subscriber's queue is bounded (``limit``): a subscriber that cannot keep up is marked
``dropped`` (its socket is closed by its owner) rather than growing the server's memory.
Resume: :func:`since` reads the rows after a given ``seq``; a subscriber registered *before*
that read gets every later row from the feed, and skips what the read already gave (``cursor``),
so nothing is missed or repeated. Waiters (:meth:`Feed.delivered`) let a request answer only once
its sync events are delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg

from dap.server.events import channels, outbox
from dap.server.storage import db

log = logging.getLogger(__name__)
READ = "SELECT * FROM dap.outbox WHERE seq > $1 ORDER BY seq LIMIT $2"
HEAD = "SELECT coalesce(max(seq), 0) FROM dap.outbox WHERE seq IS NOT NULL"
PAGE = 1000
DELIVERED = "SELECT public_id FROM dap.outbox WHERE public_id = ANY($1::uuid[]) AND seq IS NOT NULL"


@dataclass(eq=False)
class Subscriber:
    """One consumer of the feed: which events it wants, and its bounded queue."""

    wants: Callable[[channels.Event], bool]
    limit: int = 256
    cursor: int = 0  # the highest seq already given to it
    dropped: bool = False
    queue: asyncio.Queue[tuple[int, channels.Event]] = field(init=False)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(self.limit)

    def offer(self, seq: int, event: channels.Event) -> None:
        if self.dropped or seq <= self.cursor or not self.wants(event):
            return
        try:
            self.queue.put_nowait((seq, event))
        except asyncio.QueueFull:
            self.dropped = True  # too slow: its owner closes it; the server keeps its memory


async def since(conn: db.Connection, seq: int, limit: int = PAGE) -> list[tuple[int, channels.Event]]:
    rows = await conn.fetch(READ, seq, limit)
    return [(r["seq"], channels.Event.of(r)) for r in rows]


class Feed:
    def __init__(self, pool: asyncpg.Pool, dsn: str, *, poll: float = 2.0) -> None:
        self.pool, self.dsn, self.poll = pool, dsn, poll
        self.subscribers: set[Subscriber] = set()
        self.position = 0
        self._wake = asyncio.Event()
        self._waiters: dict[uuid.UUID, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listener = db.Listener(dsn, outbox.FEED, self._wake, self._heard)
        self._heard_seq = 0  # the highest seq a dap_feed NOTIFY named
        self._synced = -1  # the listener's connection (``opened``) since whose start HEAD was read

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dap-events-feed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._listener.close()

    def subscribe(self, subscriber: Subscriber) -> Subscriber:
        self.subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    async def delivered(self, ids: list[uuid.UUID], seconds: float) -> bool:
        """Wait until every event of ``ids`` has reached the feed (at most ``seconds``); whether it has."""
        futures = [self._waiters.setdefault(i, asyncio.get_running_loop().create_future()) for i in ids]
        async with db.connection(self.pool) as conn:  # delivered before the waiter was registered
            for row in await conn.fetch(DELIVERED, ids):
                found = self._waiters.get(row["public_id"])
                if found is not None and not found.done():
                    found.set_result(None)
        try:
            async with asyncio.timeout(seconds):
                await asyncio.gather(*futures)
            return True
        except TimeoutError:
            return False
        finally:
            for i in ids:
                self._waiters.pop(i, None)

    async def _run(self) -> None:
        async with db.connection(self.pool) as conn:
            self.position = await conn.fetchval(HEAD)
        while True:
            try:
                await self._listener.ensure()
                self._wake.clear()
                await self._read()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("events feed round failed")
                await self._listener.close()  # a fresh one next round
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll):  # not wait_for: 3.11 loses a stop there
                    await self._wake.wait()

    def _heard(self, payload: str) -> None:
        """A ``dap_feed`` NOTIFY: its payload is the highest seq its transaction gave."""
        with contextlib.suppress(ValueError):
            self._heard_seq = max(self._heard_seq, int(payload))

    def _idle(self) -> bool:
        return not self.subscribers and not self._waiters

    async def _read(self) -> None:
        if self._idle():  # nobody here to offer rows to: move to the head without reading them
            if self._synced == self._listener.opened:  # listening all along since the last HEAD:
                # every seq is given by a transaction that NOTIFYs its highest, in commit order
                head = self._heard_seq
            else:  # a new listener (notifications in between were missed): ask
                self._synced = self._listener.opened
                async with db.connection(self.pool) as conn:
                    head = await conn.fetchval(HEAD)
            if self._idle():  # still: one who came during the query is served by the read below
                # seq order is commit order (``dispatcher``), so nothing below the head commits later;
                # one who comes now reads what it missed itself (``since``, ``delivered``)
                self.position = max(self.position, head)
                return
        while True:
            async with db.connection(self.pool) as conn:
                page = await since(conn, self.position)
            for n, (seq, event) in enumerate(page, 1):
                if n % 64 == 0:
                    await asyncio.sleep(0)  # let the sockets' writers drain between slices of a page
                self.position = seq
                for subscriber in list(self.subscribers):
                    subscriber.offer(seq, event)
                waiter = self._waiters.get(event.public_id)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            if len(page) < PAGE:
                return
