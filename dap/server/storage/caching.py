"""The read-through cache of find-by-id, for entities that declare ``cache: {ttl: ...}``.

Each process keeps one bounded map from ``(table, tenant, id)`` to the rendered answer (body and
ETag). Several processes may serve one database, so the rule is: once a client has the answer
to a write, no process serves the record's old answer. Three parts make that hold.

* **Announce in the write's transaction.** A write of a cached entity calls :func:`announce`
  inside its transaction; that queues ``pg_notify`` on :data:`CHANNEL`, which Postgres delivers
  at commit and drops on rollback. There is no moment where the commit is visible and the
  announcement lost, and a rolled back write announces nothing.
* **One listener connection per process** (:class:`Listener`, not from the pool) ``LISTEN``s and
  invalidates on every notification. It reconnects when the connection drops; while it is down
  no hit is served and nothing is stored, and every transition (lost, re-established) drops all
  entries, since notifications may have been missed in between.
* **A freshness barrier on every hit.** Notifications are asynchronous: the client's next
  request may reach another process before that process has read the notification. So a hit is
  served only after a round trip on the listener connection that *started after the request
  arrived*. Postgres sends every notification pending for a session before that session's
  ``ReadyForQuery`` (``postgres.c``, since 13), notifications are queued in commit order (commits
  that notify are serialised), and asyncpg schedules a listener callback before it resumes the
  query's awaiter; so when the barrier returns, every write committed before the request arrived
  has been applied. Concurrent hits share one barrier: a hit joins the next round trip, never one
  already in flight. ``tests/server/test_caching.py`` checks this ordering against the real server.

A read that races a write must not store what it read before the write committed: every
invalidation gets a stamp, and :meth:`FindCache.put` refuses an answer whose read began before
the latest invalidation of its record (or table, or a reset). Entries also expire after the
entity's TTL (clamped to 1 s to 1 h), which bounds how long a change made outside the server
(plain SQL, a process running an older spec that does not cache the entity) can show, and are
served only to requests reading the same catalog they were rendered with, so a spec swap never
serves a record in an old shape. Keys carry the tenant: one workspace never reads another's entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from dap.config import durations
from dap.server.storage import tables

if TYPE_CHECKING:  # the boot path imports this module through the catalog: no web stack here
    from dap.server.storage import db

log = logging.getLogger(__name__)

MIN_TTL, MAX_TTL = 1.0, 3600.0
MAX_ENTRIES = 10_000
MAX_STAMPS = 10_000  # remembered invalidations; past this they are forgotten by raising the floor
CHANNEL = "dap_find_cache"
BARRIER = "SELECT 1"  # any statement: what matters is its round trip
BARRIER_TIMEOUT = 5.0  # a barrier slower than this counts as a lost listener
CONNECT_TIMEOUT = 10.0
RETRY_FIRST, RETRY_MAX = 0.1, 5.0
_DB_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)

Key = tuple[str, uuid.UUID, uuid.UUID]  # table, tenant, record id
Scope = tuple[str, uuid.UUID | None]  # table, tenant (None: every tenant)


class Cacheable(Protocol):
    """What the cache needs of an entity (``dap.server.catalog.Resource`` is one)."""

    @property
    def table(self) -> tables.Table: ...

    @property
    def cache_ttl(self) -> float | None: ...


def ttl_seconds(ttl: str | None) -> float | None:
    """The TTL of a ``CacheSpec``, clamped to the spec's limits; ``None`` when not declared."""
    if ttl is None:
        return None
    return min(MAX_TTL, max(MIN_TTL, durations.parse(ttl).total_seconds()))


async def announce(
    conn: db.Connection, resource: Cacheable | None, tenant: uuid.UUID, record_id: uuid.UUID | None = None
) -> None:
    """Inside a write's transaction: every process drops the record's cached answer at commit.

    Without ``record_id`` every cached answer of ``resource`` in ``tenant`` is dropped (for
    statements that change rows the caller does not list, such as ``on_delete`` effects). Writes
    of entities that declare no cache announce nothing: a notifying commit takes Postgres's
    notification lock, which serialises such commits, so only cached entities pay for it.
    """
    if resource is None or resource.cache_ttl is None:
        return
    if not conn.is_in_transaction():
        raise RuntimeError("announce belongs inside the write's transaction")
    target = "*" if record_id is None else str(record_id)
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, f"{tenant} {target} {resource.table.name}")


def parse(payload: str) -> tuple[str, uuid.UUID, uuid.UUID | None] | None:
    """``(table, tenant, record id or None)`` of an announcement; ``None`` when malformed."""
    parts = payload.split(" ", 2)
    if len(parts) != 3:
        return None
    try:
        tenant = uuid.UUID(parts[0])
        record = None if parts[1] == "*" else uuid.UUID(parts[1])
    except ValueError:
        return None
    return parts[2], tenant, record


@dataclass(frozen=True)
class Entry:
    expires: float
    catalog: Any  # the Catalog the body was rendered from (compared by identity)
    body: bytes  # the encoded JSON, sent as it is
    etag: str


class FindCache:
    """The bounded map of one process, its invalidation stamps and (given a DSN) its listener."""

    def __init__(self, dsn: str | None = None, *, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[Key, Entry] = {}
        self._max = max_entries
        self._stamp = 0  # bumped by every invalidation
        self._floor = 0  # reads that began before this stamp are never stored
        self._records: dict[Key, int] = {}  # stamp of each record's last invalidation
        self._scopes: dict[Scope, int] = {}  # stamp of each table's (per tenant) last invalidation
        self._live = False
        self.hits = 0  # answers served from the map
        self.listener = Listener(dsn, self) if dsn is not None else None

    @property
    def epoch(self) -> int:
        """Take before reading a record; hand to :meth:`put` with what was read."""
        return self._stamp

    @property
    def live(self) -> bool:
        """Whether invalidations are being received (hits and stores happen only then)."""
        return self._live

    def peek(self, key: Key, catalog: Any) -> Entry | None:
        """The local entry, without the freshness barrier (see :meth:`lookup`)."""
        entry = self._entries.get(key)
        if entry is None or not self._live:
            return None
        if entry.expires <= time.monotonic() or entry.catalog is not catalog:
            self._entries.pop(key, None)
            return None
        return entry

    async def lookup(self, key: Key, catalog: Any) -> Entry | None:
        """The cached answer, if there is one and no write committed before this call changed it."""
        if self.listener is not None:
            self.listener.start()
        if self.peek(key, catalog) is None or self.listener is None:
            return None
        if not await self.listener.barrier():
            return None
        entry = self.peek(key, catalog)  # the barrier applied every earlier write's invalidation
        self.hits += entry is not None
        return entry

    def put(self, key: Key, *, epoch: int, ttl: float, catalog: Any, body: bytes, etag: str) -> None:
        """Store an answer read after ``epoch`` unless something it covers was invalidated since."""
        if not self._live or epoch < self._floor or self._records.get(key, 0) > epoch:
            return
        if self._scopes.get((key[0], key[1]), 0) > epoch or self._scopes.get((key[0], None), 0) > epoch:
            return
        if len(self._entries) >= self._max:
            now = time.monotonic()
            self._entries = {k: e for k, e in self._entries.items() if e.expires > now}
            if len(self._entries) >= self._max:  # still full of live entries: start over
                self._entries.clear()
        self._entries[key] = Entry(time.monotonic() + ttl, catalog, body, etag)

    def invalidate(self, key: Key) -> None:
        self._stamp += 1
        self._remember(self._records, key)
        self._entries.pop(key, None)

    def drop_table(self, table: str, tenant: uuid.UUID | None = None) -> None:
        """Forget every answer of ``table`` (of one tenant, or of all when ``tenant`` is None)."""
        self._stamp += 1
        self._remember(self._scopes, (table, tenant))
        self._entries = {
            k: e for k, e in self._entries.items() if k[0] != table or (tenant is not None and k[1] != tenant)
        }

    def reset(self, *, live: bool) -> None:
        """Forget everything and refuse every read begun so far (the listener came up or went down)."""
        self._stamp += 1
        self._floor = self._stamp
        self._records.clear()
        self._scopes.clear()
        self._entries.clear()
        self._live = live

    def _remember(self, stamps: dict[Any, int], name: Any) -> None:
        if len(stamps) >= MAX_STAMPS:
            # forgetting the stamps is safe once reads begun before now are refused
            self._floor = self._stamp - 1
            stamps.clear()
        stamps[name] = self._stamp

    def __len__(self) -> int:
        return len(self._entries)


class Listener:
    """The process's dedicated ``LISTEN`` connection, kept open, and the coalesced barrier on it."""

    def __init__(self, dsn: str, cache: FindCache, *, retry_first: float = RETRY_FIRST) -> None:
        self._dsn = dsn
        self._cache = cache
        self.retry_first = retry_first
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None
        self._task: asyncio.Task[None] | None = None
        self._next: asyncio.Future[bool] | None = None  # the barrier that has not started yet
        self._barriers: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The listening backend's process id (``pg_stat_activity.pid``), while connected."""
        return self._conn.get_server_pid() if self._conn is not None else None

    def start(self) -> None:
        """Connect and listen in the background (idempotent); hits start once it is up."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name="find-cache-listener")

    async def stop(self) -> None:
        for task in (self._task, self._barriers):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._barriers = None
        if self._next is not None and not self._next.done():
            self._next.set_result(False)
        self._next = None

    async def barrier(self) -> bool:
        """True once every notification committed before this call has been applied to the cache.

        False when the listener is down or the round trip fails; the caller then reads the
        database. Callers arriving while a round trip is in flight share the next one.
        """
        if self._conn is None:
            return False
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._barriers is None:
                self._barriers = asyncio.get_running_loop().create_task(self._run_barriers())
        return await asyncio.shield(self._next)

    async def _run_barriers(self) -> None:
        fut: asyncio.Future[bool] | None = None
        try:
            while self._next is not None:
                fut, self._next = self._next, None
                ok = await self._round_trip()
                if not fut.done():
                    fut.set_result(ok)
        finally:
            if fut is not None and not fut.done():
                fut.set_result(False)
            self._barriers = None

    async def _round_trip(self) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            # Postgres sends every pending notification before this statement's ReadyForQuery,
            # and asyncpg runs their (synchronous) callback before this await resumes
            await conn.execute(BARRIER, timeout=BARRIER_TIMEOUT)
        except _DB_ERRORS as exc:
            log.warning("find cache barrier failed; hits are off until the listener reconnects: %r", exc)
            self._lose(conn)
            conn.terminate()
            return False
        return self._conn is conn

    def _notified(self, con_ref: object, pid: int, channel: str, payload: object, /) -> None:
        parsed = parse(payload) if isinstance(payload, str) else None
        if parsed is None:  # not ours to understand: forget everything rather than guess
            log.warning("unreadable find cache notification %r; dropping every cached answer", payload)
            self._cache.reset(live=self._cache.live)
            return
        table, tenant, record = parsed
        if record is None:
            self._cache.drop_table(table, tenant)
        else:
            self._cache.invalidate((table, tenant, record))

    def _lose(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        if self._conn is conn:
            self._conn = None
            self._cache.reset(live=False)

    async def _connect(self) -> asyncpg.Connection[asyncpg.Record] | None:
        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=CONNECT_TIMEOUT,
                server_settings={"application_name": "dap find-cache listener"},
            )
        except _DB_ERRORS as exc:
            log.warning("find cache listener cannot connect (hits stay off): %r", exc)
            return None
        try:
            await conn.add_listener(CHANNEL, self._notified)
        except _DB_ERRORS as exc:
            log.warning("find cache listener cannot LISTEN (hits stay off): %r", exc)
            conn.terminate()
            return None
        return conn

    async def _supervise(self) -> None:
        delay = self.retry_first
        while True:
            conn = await self._connect()
            if conn is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = self.retry_first
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _con, lost=lost: lost.set())
            self._conn = conn
            self._cache.reset(live=True)  # what was cached before may have missed notifications
            try:
                await lost.wait()
            finally:
                self._lose(conn)
                if not conn.is_closed():
                    conn.terminate()
            log.warning("find cache listener connection lost; hits are off until it reconnects")
            await asyncio.sleep(self.retry_first)
