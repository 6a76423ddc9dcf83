"""The process's one asyncpg pool: how it is opened and what a connection type is.

JSON and jsonb columns get a codec at connection time, so handlers pass and receive Python
values; ``Decimal``, dates and uuids inside JSON are written as strings (exact, never floats).
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from dap.server import errors

Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"


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
