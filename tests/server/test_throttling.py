"""Rate limits counted in Postgres: one budget per key for every process, a fixed window."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from dap.server import errors
from dap.server.access import throttling

pytestmark = pytest.mark.asyncio


async def test_two_connections_share_one_budget_and_the_window_resets(pg_dsn: str) -> None:
    first, second = await asyncpg.connect(pg_dsn), await asyncpg.connect(pg_dsn)  # two processes' worth
    try:
        await throttling.ensure_schema(first)
        limit = throttling.Limit("test:shared", hits=4, window=1.0)
        for conn in (first, second, first, second):
            await throttling.check(conn, limit, "who")
        with pytest.raises(errors.RateLimited) as refused:
            await throttling.check(second, limit, "who")
        assert refused.value.headers["Retry-After"] == "1"
        await throttling.check(first, limit, "someone else")  # keys count apart
        await asyncio.sleep(1.1)
        await throttling.check(first, limit, "who")  # a new window
    finally:
        await first.close()
        await second.close()
