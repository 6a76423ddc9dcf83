"""What every one-shot command on the control's database shares (``freeze``, ``policy``).

``--db`` names the region's or standalone control's Postgres; :func:`in_transaction` runs one
piece of work in one transaction on a single connection, and turns the package's refusals into
click's exit 1 with the reason on stderr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from dap.control import errors
from dap.control.storage import store

T = TypeVar("T")
DB = click.option(
    "--db", required=True, envvar="DAP_DB", help="postgresql:// DSN of the region or standalone"
)


def in_transaction(dsn: str, work: Callable[[store.Conn], Awaitable[T]]) -> T:
    async def main() -> T:
        pool = await store.connect(dsn, min_size=1, max_size=1)
        try:
            async with pool.acquire() as conn, conn.transaction():
                return await work(conn)
        finally:
            await pool.close()

    try:
        return asyncio.run(main())
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc
