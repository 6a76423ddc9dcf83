"""The database half of a boot: the pool, the platform tables, the entity schema, ``default``.

Kept free of the web stack so that ``dap serve`` reaches Postgres having imported only what the
migration needs; the HTTP modules load while Postgres creates the tables (see ``cli.serve``).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable

import asyncpg

from dap.server import errors, options
from dap.server.access import accounts, throttling
from dap.server.catalog import Catalog
from dap.server.documents import auditing, idempotency
from dap.server.storage import db, migrations, numbering, schema_sync, workspaces
from dap.server.workflows import jobs, outbox


def tls_context(opts: options.ServeOptions) -> ssl.SSLContext | None:
    """The server's TLS context (minimum TLS 1.2), or ``None`` without certificate and key."""
    if opts.tls_cert is None or opts.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(opts.tls_cert, opts.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise errors.BootRefused(f"cannot load --tls-cert/--tls-key: {exc}") from exc
    return context


async def open_database(
    opts: options.ServeOptions,
    catalog: Catalog,
    *,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    """The process's pool over a prepared database; every expected failure is ``BootRefused``.

    Unreadable TLS material is refused before Postgres is touched.
    """
    tls_context(opts)
    pool = await db.open_pool(opts.dsn, opts.pool_size)
    try:
        await prepare_database(pool, catalog, confirm=confirm)
    except errors.MigrationError as exc:
        await pool.close()
        raise errors.BootRefused(str(exc)) from exc
    except BaseException:
        await pool.close()
        raise
    return pool


async def prepare_database(
    pool: asyncpg.Pool,
    catalog: Catalog,
    *,
    allow_destructive: bool = False,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> migrations.Plan:
    """Platform tables, the entity schema (safe steps only unless allowed) and ``default``.

    ``confirm`` runs while the schema change executes and must succeed for it to commit (see
    ``schema_sync.sync``).
    """
    async with pool.acquire() as conn:
        await workspaces.ensure_schema(conn)
        await accounts.ensure_schema(conn)
        await throttling.ensure_schema(conn)
        await auditing.ensure_schema(conn)
        await idempotency.ensure_schema(conn)
        await numbering.ensure_schema(conn)
        await outbox.ensure_schema(conn)
        await jobs.ensure_schema(conn)
        plan = await schema_sync.sync(
            conn, catalog.tables, catalog.entities, allow_destructive=allow_destructive, confirm=confirm
        )
        await workspaces.seed_default(conn)
    return plan
