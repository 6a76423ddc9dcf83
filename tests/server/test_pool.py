"""The pool's light reset (``db.keep_session``) and the rule that makes it safe.

A released connection gets asyncpg's own clean-up (an open transaction rolled back) but not the
``RESET ALL; UNLISTEN *; ...`` statement: the server never leaves session state on a pooled
connection. The first test reads the code for the ways state could be left; the others show
on a real pool what a released connection still guarantees.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import asyncpg
import pytest

import dap
from dap.server.storage import db

ROOT = Path(dap.__file__).parent
# session-scoped state a statement could leave behind on a connection
SESSION_STATE = re.compile(
    r"pg_(try_)?advisory_lock(_shared)?\s*\("  # session advisory locks (the _xact_ ones end with it)
    r"|[\"']\s*SET\s+(SESSION\s+)?(?!LOCAL\b)[a-z_.]+\s*(=|TO\b)"  # a session setting
    r"|set_config\([^)]*,\s*false\s*\)",
    re.IGNORECASE,
)
STATEMENTS = re.compile(r"[\"']\s*(LISTEN|DECLARE)\s")  # LISTEN, a cursor (SQL in capitals here)
OWN_CONNECTION = {  # LISTEN on connections of their own, never the pool's
    "server/storage/caching.py",  # the find cache
    "server/storage/db.py",  # db.Listener: the events dispatcher's and feed's
    "server/storage/building.py",  # the builder's lock: released, or its connection terminated
}


def test_no_code_leaves_session_state_on_a_pooled_connection() -> None:
    found = []
    for path in [
        p for part in ("server", "resource_pod", "dev") for p in sorted((ROOT / part).rglob("*.py"))
    ]:
        if str(path.relative_to(ROOT)) in OWN_CONNECTION:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SESSION_STATE.search(line) or STATEMENTS.search(line) or "add_listener(" in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "session state on a pooled connection (db.keep_session would keep it):\n" + "\n".join(
        found
    )


async def test_a_released_connection_is_clean(pg_dsn: str) -> None:
    pool = await db.open_pool(pg_dsn, 1)  # one connection: the second acquire gets the same one
    try:
        async with db.connection(pool) as conn, conn.transaction():
            await conn.execute("SET LOCAL statement_timeout = 1234")
            await conn.execute("SELECT pg_advisory_xact_lock(42)")
        conn = await pool.acquire()
        await conn.transaction().start()
        await conn.execute("CREATE TEMP TABLE t_pool (x int) ON COMMIT DROP")
        await pool.release(conn)  # released with the transaction open: asyncpg rolls it back
        async with db.connection(pool) as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW statement_timeout") == "0"
            assert await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0
            assert await conn.fetchval("SELECT to_regclass('t_pool')") is None
    finally:
        await pool.close()


async def test_callers_get_connections_in_the_order_they_asked(pg_dsn: str) -> None:
    """More callers than connections, arriving all the time: each is served in arrival order, so
    none waits behind newcomers (asyncpg's own queue lets a newcomer take a connection released
    for a caller already waiting)."""
    pool = await db.open_pool(pg_dsn, 2)
    served: list[int] = []

    async def caller(n: int) -> None:
        async with db.connection(pool) as conn:
            served.append(n)
            await conn.execute("SELECT pg_sleep(0.003)")

    try:
        tasks = []
        for n in range(150):  # one arrival a millisecond, two connections of 3 ms each: a queue builds
            tasks.append(asyncio.create_task(caller(n)))
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        assert served == sorted(served)
    finally:
        await pool.close()


async def test_a_clean_connection_goes_straight_to_the_oldest_waiter(pg_dsn: str) -> None:
    """A caller waiting gets the connection the previous one ends with, without a trip through
    the pool; an end with an error or a transaction left open goes through the pool's release,
    which rolls the transaction back, so the next caller never inherits it."""
    pool = await db.open_pool(pg_dsn, 1)
    try:
        first = db.connection(pool)
        held = await first.__aenter__()
        waiter = asyncio.create_task(db.connection(pool).__aenter__())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        await first.__aexit__(None, None, None)
        got = await asyncio.wait_for(waiter, 5)
        assert got is held  # the same proxy: handed over, not released and acquired again
        assert pool.get_idle_size() == 0

        # got's turn ends with a transaction left open: the pool's release rolls it back first
        await got.execute("BEGIN")
        await got.execute("CREATE TEMP TABLE t_handed (x int)")
        waiter = asyncio.create_task(db.connection(pool).__aenter__())
        await asyncio.sleep(0.01)
        await db.connection.__aexit__(_holding(pool, got), None, None, None)
        fresh = await asyncio.wait_for(waiter, 5)
        assert fresh is not got  # a new proxy from the pool
        assert not fresh.is_in_transaction()
        assert await fresh.fetchval("SELECT to_regclass('t_handed')") is None

        # an error ends the turn: through the pool too
        waiter = asyncio.create_task(db.connection(pool).__aenter__())
        await asyncio.sleep(0.01)
        await db.connection.__aexit__(_holding(pool, fresh), ValueError, ValueError("x"), None)
        assert (await asyncio.wait_for(waiter, 5)) is not fresh
    finally:
        pool.terminate()


async def test_a_connection_handed_to_a_cancelled_waiter_goes_back_to_the_pool(pg_dsn: str) -> None:
    pool = await db.open_pool(pg_dsn, 1)
    try:
        first = db.connection(pool)
        await first.__aenter__()
        waiter = asyncio.create_task(db.connection(pool).__aenter__())
        await asyncio.sleep(0.01)
        await first.__aexit__(None, None, None)  # handed to the waiter, which has not run yet
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        for _ in range(100):  # the connection goes back to the pool, and its place is free again
            if pool.get_idle_size() == 1:
                break
            await asyncio.sleep(0.01)
        assert pool.get_idle_size() == 1
        async with db.connection(pool) as conn:
            assert await asyncio.wait_for(conn.fetchval("SELECT 1"), 5) == 1
    finally:
        await pool.close()


def _holding(pool: asyncpg.Pool, conn: db.Connection) -> db.connection:
    """A ``db.connection`` whose turn holds ``conn`` (to end a turn a test started by hand)."""
    holder = db.connection(pool)
    holder._conn = conn  # type: ignore[assignment]
    return holder
