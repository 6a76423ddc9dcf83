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

import contextlib
import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from dap.server import errors

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


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(kind, encoder=_encode, decoder=json.loads, schema="pg_catalog")


async def open_pool(dsn: str, size: int) -> asyncpg.Pool[asyncpg.Record]:
    """The process's one pool; an unreachable or refusing Postgres refuses the boot."""
    try:
        pool = await asyncpg.create_pool(dsn, min_size=min(2, size), max_size=size, init=_init_connection)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.BootRefused(f"cannot connect to Postgres: {exc.__class__.__name__}: {exc}") from exc
    assert pool is not None
    return pool


@contextlib.asynccontextmanager
async def connection(pool: asyncpg.Pool[asyncpg.Record]) -> AsyncIterator[Connection]:
    """A connection of the pool, given back without ever failing the request that used it."""
    conn = await pool.acquire()
    try:
        yield conn
    finally:
        try:
            await pool.release(conn)
        except Exception as exc:  # asyncpg terminated it: the pool opens a new one when needed
            log.warning("dropped a connection that broke after its request: %s", exc.__class__.__name__)


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
        raise errors.ServiceUnavailable(
            "the connection to Postgres broke while this write was committing, so it may or may not "
            "have happened: read the record before writing again, or repeat a create with the same "
            "Idempotency-Key",
            retry_after=RETRY_AFTER,
            code="SVC.DB.OUTCOME_UNKNOWN",
        ) from exc
