"""The process's one asyncpg pool: how it is opened, lent out and committed on, and what a
connection type is.

JSON and jsonb columns get a codec at connection time, so handlers pass and receive Python
values; ``Decimal``, dates and uuids inside JSON are written as strings (exact, never floats).

A lost connection is told apart by when it is lost (``UNREACHABLE`` names the errors):

- before or during a statement: nothing was committed, the request answers 503 with
  ``Retry-After`` (the web middleware maps these errors);
- while committing (:func:`committed`): the write may or may not have happened, which the 503
  says (``SVC.DB.OUTCOME_UNKNOWN``); creates can be repeated safely with an ``Idempotency-Key``;
- after the commit, when the connection goes back to the pool (:func:`connection`): the answer
  stands, the broken connection only leaves the pool. Postgres dying right after a commit must
  never tell the client that a committed write failed, or its retry writes twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from dap import tracing
from dap.server import errors
from dap.server.storage import gates

Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
log = logging.getLogger(__name__)

# Postgres cannot be reached, or the connection to it broke (refused, reset, shut down, timed out)
UNREACHABLE: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
)
RETRY_AFTER = 5  # seconds a client is asked to wait when Postgres is unreachable


def json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _encode(value: Any) -> str:
    return json.dumps(value, default=json_default)


# The json/jsonb codec's decoder: a column read as text (``::text``, to decode it only when needed)
# is decoded by this, so that it reads as the codec would have read it.
decode_json = json.loads


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(kind, encoder=_encode, decoder=decode_json, schema="pg_catalog")


async def keep_session(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """The pool's reset of a released connection: nothing beyond what asyncpg always does.

    asyncpg always rolls back a transaction left open and drops listener callbacks; its default
    reset then sends one more statement per release (``pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL``), a round trip to Postgres on every request (about 7% of a
    find-by-id's time in the server, and Postgres's own work besides: docs/performance.md). The
    server never leaves session state on a pooled connection -- advisory locks are
    ``pg_advisory_xact_lock``, settings ``SET LOCAL``, ``LISTEN`` runs on the find cache's own
    connection, cursors live in transactions -- so there is nothing for that statement to undo
    (``tests/server/test_pool.py`` keeps the code to that rule).
    """


async def open_pool(dsn: str, size: int) -> asyncpg.Pool[asyncpg.Record]:
    """The process's one pool; an unreachable or refusing Postgres refuses the boot."""
    try:
        pool = await asyncpg.create_pool(
            dsn, min_size=min(2, size), max_size=size, init=_init_connection, reset=keep_session
        )
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.BootRefused(f"cannot connect to Postgres: {exc.__class__.__name__}: {exc}") from exc
    assert pool is not None
    return pool


class connection:  # noqa: N801 -- used as a function: ``async with db.connection(pool) as conn``
    """A connection of the pool, given back without ever failing the request that used it.

    Callers queue for it in arrival order (:func:`gate`): asyncpg's pool hands a released
    connection to whichever task asks next, so under more requests than connections a task woken
    for a connection can lose it to a newcomer, again and again. On uvloop that left one find in
    a hundred waiting 0.3-0.9 s with 32 clients on a pool of 10 (docs/performance.md).

    When a caller waits, a connection that ends its turn cleanly -- no error, no transaction left
    open, not closed -- goes straight to the oldest waiter instead of through asyncpg's pool: the
    pool's release and acquire cost about 20 µs together (a shielded task, a timeout scope, a new
    proxy), as much as the rest of a find's own work in the server. What the pool's release does
    beyond that is moot for such a connection: its reset (``keep_session``) is empty, listeners
    are never added to pool connections (``tests/server/test_pool.py``), and a cancelled query is
    waited for by the connection's next one. Every other end goes through the pool's release.

    Every user of the server's pool goes through here, so that no one waits behind callers that
    keep handing connections over. A class rather than an ``asynccontextmanager`` generator:
    every request enters one, and the generator's machinery costs more than the acquire itself.
    """

    __slots__ = ("_conn", "_gate", "_pool")

    def __init__(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        self._pool = pool
        self._gate = gate(pool)
        self._conn: PoolConnectionProxy[asyncpg.Record] | None = None

    async def __aenter__(self) -> Connection:
        handed = await self._gate.acquire()
        if handed is not None:
            self._conn = handed
        else:
            try:
                self._conn = await self._pool.acquire()
            except BaseException:
                self._gate.release()
                raise
        return tracing.timed(self._conn)  # an event per statement of a sampled trace

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        clean = exc_type is None and not conn.is_closed() and not conn.is_in_transaction()
        if clean and self._gate.hand_over(conn):
            return
        await _give_back(self._pool, self._gate, conn)


Pooled: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"


async def _give_back(pool: asyncpg.Pool[asyncpg.Record], place: gates.Gate[Pooled], conn: Pooled) -> None:
    try:
        await pool.release(conn)
    except Exception as exc:  # asyncpg terminated it: the pool opens a new one when needed
        log.warning("dropped a connection that broke after its request: %s", exc.__class__.__name__)
    finally:
        place.release()


_gates: dict[int, tuple[asyncpg.Pool[asyncpg.Record], gates.Gate[Pooled]]] = {}
_orphans: set[asyncio.Task[None]] = set()  # connections going back to their pool (see ``gate``)


def gate(pool: asyncpg.Pool[asyncpg.Record]) -> gates.Gate[Pooled]:
    """The first-come, first-served queue in front of ``pool`` (``gates.Gate``: no newcomer passes
    a waiting caller), as many places as the pool has connections. A connection handed to a
    caller cancelled while it waited, with nobody else waiting, goes back to the pool.

    Kept by the pool's id with the pool itself (asyncpg's pools take no weak references), so an id
    is never reused while its entry lives; a process opens one pool, tests a few hundred.
    """
    found = _gates.get(id(pool))
    if found is None or found[0] is not pool:

        def orphan(conn: Pooled) -> None:
            task = asyncio.get_running_loop().create_task(_give_back(pool, place, conn))
            _orphans.add(task)
            task.add_done_callback(_orphans.discard)

        place: gates.Gate[Pooled] = gates.Gate(pool.get_max_size(), orphan)
        found = _gates[id(pool)] = (pool, place)
    return found[1]


def waits(pool: asyncpg.Pool[asyncpg.Record]) -> tuple[int, int, float]:
    """The pool's queue for the metrics: (callers waiting now, waits so far, seconds waited so far)."""
    place = gate(pool)
    return place.waiting, place.waited, place.waited_seconds


@contextlib.asynccontextmanager
async def committed(conn: Connection) -> AsyncIterator[None]:
    """A transaction, like ``conn.transaction()``, whose commit lost with the connection is a 503
    saying that the outcome is unknown (not a 500, and not "nothing happened")."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        yield
    except BaseException:
        with contextlib.suppress(*UNREACHABLE, asyncpg.InterfaceError):
            await transaction.rollback()
        raise
    try:
        await transaction.commit()
    except UNREACHABLE as exc:
        raise outcome_unknown() from exc


def outcome_unknown() -> errors.ServiceUnavailable:
    """The 503 of a write whose commit was lost with its connection: it may or may not have happened."""
    return errors.ServiceUnavailable(
        "the connection to Postgres broke while this write was committing, so it may or may not "
        "have happened: read the record before writing again, or repeat a create with the same "
        "Idempotency-Key",
        retry_after=RETRY_AFTER,
        code="SVC.DB.OUTCOME_UNKNOWN",
    )


class Listener:
    """A connection of its own that LISTENs on ``channel`` and sets ``wake`` at each notification.

    Never a pooled connection: the pool keeps session state (``keep_session``), so a LISTEN there
    would outlive its user. :meth:`ensure` (re)opens it when closed or lost; :meth:`close` never
    raises, so a failed round can drop it and the next one opens a fresh one.
    """

    def __init__(
        self, dsn: str, channel: str, wake: asyncio.Event, heard: Callable[[str], None] | None = None
    ) -> None:
        self.dsn, self.channel, self.wake, self.heard = dsn, channel, wake, heard
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None
        self.opened = 0  # connections opened so far: notifications sent in between were missed

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if self.heard is not None:
            self.heard(str(payload))
        self.wake.set()

    async def ensure(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            return
        await self.close()
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.add_listener(self.channel, self._notified)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self.opened += 1

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)


_PLATFORM_DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.platform_ddl (
    name text PRIMARY KEY,
    digest text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


async def ensure_platform(conn: Connection, name: str, ddl: str) -> None:
    """Run a platform module's DDL when it is new or has changed since it last ran; else nothing.

    The DDL is idempotent (``IF NOT EXISTS``), but ``ALTER TABLE`` and ``CREATE INDEX`` take their
    table's strongest locks even when they change nothing: run at every boot, they would queue
    behind any open transaction on a busy table (the outbox, the audit log) and stall every write
    queued behind them, so a rolling deploy would pause the running pods' writes. So each
    module's DDL runs once per text (its digest is kept in ``dap.platform_ddl``), under a
    transaction-scoped advisory lock, so that processes booting together apply it once.
    """
    digest = hashlib.sha256(ddl.encode()).hexdigest()
    try:
        if await conn.fetchval("SELECT digest FROM dap.platform_ddl WHERE name = $1", name) == digest:
            return
    except asyncpg.UndefinedTableError:
        pass  # a database no dap process has booted on yet
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('dap.platform_ddl'))")
        await conn.execute(_PLATFORM_DDL)
        if await conn.fetchval("SELECT digest FROM dap.platform_ddl WHERE name = $1", name) == digest:
            return  # another process applied it while this one waited
        await conn.execute(ddl)
        await conn.execute(
            "INSERT INTO dap.platform_ddl (name, digest) VALUES ($1, $2) "
            "ON CONFLICT (name) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()",
            name,
            digest,
        )
