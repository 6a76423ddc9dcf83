"""The Postgres fixture is real: it runs SQL and isolates modules."""

from __future__ import annotations

import asyncpg


async def test_fixture_runs_sql(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TABLE probe (id int PRIMARY KEY, note text NOT NULL)")
        await conn.execute("INSERT INTO probe VALUES (1, 'hello')")
        assert await conn.fetchval("SELECT note FROM probe WHERE id = 1") == "hello"
        assert (await conn.fetchval("SELECT current_setting('server_version_num')::int")) >= 140000
    finally:
        await conn.close()


async def test_fixture_database_is_fresh_per_module(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        tables = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_name <> 'probe'"
        )
        assert tables == 0
    finally:
        await conn.close()
