"""A laptop run of the production server: embedded Postgres, a spec, a workspace, a token.

    .venv/bin/python -m dap.server.dev [--spec examples/procurement] [--addr 127.0.0.1:8080]

Until the resource pod's ``dap dev`` hosts the whole pipeline, this is the shortest way to see
the REST API: it starts the embedded Postgres under ``.dap/pg`` (or uses ``--dsn``), boots the
same server ``dap serve`` runs (same refusals, same migrations), registers the workspace
``--workspace`` and prints curl commands with a freshly issued token. Nothing here relaxes a
production rule; the JWT secret is random per run unless given.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
from pathlib import Path

import click

from dap import embedded, logs
from dap.server import cli, errors, options, state
from dap.server.catalog import Catalog
from dap.server.storage import db, workspaces
from dap.server.web import app


@click.command()
@click.option("--spec", default="examples/procurement", show_default=True, envvar="DAP_SPEC")
@click.option("--dsn", envvar="DAP_DSN", help="Postgres to use instead of the embedded one")
@click.option("--data-dir", default=str(embedded.DEFAULT_DATA_DIR), show_default=True, envvar="DAP_DATA_DIR")
@click.option("--addr", default="127.0.0.1:8080", show_default=True, envvar="DAP_ADDR")
@click.option("--metrics-addr", default="127.0.0.1:9102", show_default=True, envvar="DAP_METRICS_ADDR")
@click.option("--workspace", default="demo", show_default=True, envvar="DAP_WORKSPACE")
@click.option("--jwt-secret", envvar="DAP_JWT_SECRET", help="default: random per run")
@click.option("--cors-origin", default="http://localhost:3000", show_default=True, envvar="DAP_CORS_ORIGIN")
@click.option("--log-level", default="warn", show_default=True, envvar="DAP_LOG_LEVEL")
def dev(
    spec: str,
    dsn: str | None,
    data_dir: str,
    addr: str,
    metrics_addr: str,
    workspace: str,
    jwt_secret: str | None,
    cors_origin: str,
    log_level: str,
) -> None:
    """Serve a spec on embedded Postgres and print working curl commands."""
    logs.configure(log_level)
    handle = None
    try:
        if not dsn:
            click.echo(f"starting embedded Postgres in {data_dir} ...", err=True)
            dsn, handle = embedded.start(Path(data_dir))
        admin_secret = secrets.token_hex(16)
        opts = options.check(
            spec=spec,
            dsn=dsn,
            addr=addr,
            metrics_addr=metrics_addr,
            jwt_secret=jwt_secret or secrets.token_hex(32),
            cors_origins=[cors_origin],
            admin_secret=admin_secret,
            log_level=log_level,
        )
        catalog = cli.load_catalog(opts.spec)
        asyncio.run(_run(opts, catalog, workspace))
    except (errors.BootRefused, embedded.EmbeddedPostgresError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if handle is not None:
            handle.cleanup()


async def _run(opts: options.ServeOptions, catalog: Catalog, slug: str) -> None:
    server = await app.create_server(opts, catalog)
    pool = await db.open_pool(opts.dsn, 1)
    try:
        async with pool.acquire() as conn:
            await workspaces.register(conn, slug, slug.replace("-", " ").title())
    finally:
        await pool.close()
    await server.start()
    token = server.app[state.VERIFIER].issue(
        sub="dev", username="dev", roles=["admin"], workspace=slug, ttl=86400
    )
    api = server.urls["api"]
    click.echo(server.banner(), err=True)
    click.echo(f"\nworkspace {slug!r} registered; a token valid for 24 h:\n\n  export TOKEN={token}\n")
    examples = sorted(catalog.resources)[:3]
    for key in examples:
        click.echo(f'  curl -s -H "Authorization: Bearer $TOKEN" {api}/{slug}/api/{key}')
    click.echo(f"  curl -s {api}/{slug}/api/openapi.json | head -c 300; echo")
    click.echo(f"  curl -s {api}/{slug}/_ui/_meta/apps\n  curl -s {server.urls.get('admin', '')}/health\n")
    click.echo("Ctrl-C stops.", err=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    dev()
