"""``dap serve``, ``dap migrate`` and ``dap seed``.

Every option is also read from ``DAP_<OPTION>`` (``DAP_DSN``, ``DAP_JWT_SECRET``, ...). A refusal
is one line on stderr and a non-zero exit (2 for an unsupported ``--mode``), never a traceback:
every expected failure is a :class:`~dap.server.errors.BootRefused` or a ``SpecError`` and is
caught here; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from dap import config, listening, logs, tracing
from dap.server import booting, errors, loops, options
from dap.server.catalog import Catalog
from dap.server.storage import db, schema_sync

if TYPE_CHECKING:
    from aiohttp import web

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)
# What the process entry point hosts beside the server (``dap.bridge.cli`` adds the app-process
# bridge): each is called with the server's application and options before it starts. The server
# never imports those parts itself.
Attach = Callable[["web.Application", options.ServeOptions], object]


def _attach_rpc(app: web.Application, opts: options.ServeOptions) -> object:
    """The gRPC listener (``dap.server.rpc``), imported only when ``--grpc-addr`` asks for it."""
    if opts.grpc_addr is None:
        return None
    from dap.server.rpc import server as rpc_server

    return rpc_server.attach(app, opts)


ATTACH: list[Attach] = [_attach_rpc]


def _refuse(message: str, code: int = 1) -> NoReturn:
    click.echo(f"dap: {message}", err=True)
    sys.exit(code)


def keep_logs(raw: dict[str, Any]) -> None:
    """Take ``--logs-file`` and ``--logs-file-size`` out of ``raw`` (``dap serve``'s and ``dap pod``'s
    parameters) and keep the logs window on disk as they say; a bad value refuses the start."""
    path, size = raw.pop("logs_file", None), raw.pop("logs_file_size", None)
    try:
        logs.keep_on_disk(path, size)
    except ValueError as exc:
        _refuse(f"--logs-file-size: {exc}", 2)
    except OSError as exc:
        _refuse(f"--logs-file {path}: {exc.strerror or exc}", 2)


def load_catalog(spec_dir: Path) -> Catalog:
    """The catalog of a manifest directory; invalid manifests refuse the boot in one line."""
    staged = stage_catalog(spec_dir)
    confirm_spec(staged.spec, spec_dir)
    return staged.catalog


@dataclass(frozen=True)
class StagedCatalog:
    """A catalog built from a staged spec: ``confirm_spec`` must pass before it is served."""

    spec: config.StagedSpec
    catalog: Catalog


def stage_catalog(spec_dir: Path) -> StagedCatalog:
    """Build the catalog with the manifests' JSON Schema pass still to run (``confirm_spec``)."""
    if not spec_dir.is_dir():
        raise errors.BootRefused(f"--spec {spec_dir} is not a directory")
    try:
        staged = config.stage_files(config.read_files(spec_dir))
    except config.SpecError as exc:
        raise _invalid(spec_dir, exc) from exc
    return StagedCatalog(staged, Catalog.from_spec(staged.spec))


def confirm_spec(staged: config.StagedSpec, spec_dir: Path) -> None:
    try:
        staged.confirm()
    except config.SpecError as exc:
        raise _invalid(spec_dir, exc) from exc


def _invalid(spec_dir: Path, exc: config.SpecError) -> errors.BootRefused:
    first = exc.problems[0] if exc.problems else None
    return errors.BootRefused(
        f"the manifests in {spec_dir} are invalid ({len(exc.problems)} problem(s)); first: {first}; "
        f"run `dap validate {spec_dir}`"
    )


def _read_key(value: str | None) -> str | None:
    """``--jwt-public-key`` is PEM text or the path of a PEM file."""
    if not value or value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        return Path(value).read_text()
    except OSError as exc:
        raise errors.BootRefused(f"cannot read --jwt-public-key {value}: {exc.strerror}") from exc


def _common(fn: F) -> F:
    fn = click.option(
        "--spec",
        "spec",
        default="./spec",
        show_default=True,
        envvar="DAP_SPEC",
        help="manifest directory, read once",
    )(fn)
    fn = click.option("--dsn", envvar="DAP_DSN", help="postgresql:// DSN (required)")(fn)
    fn = click.option(
        "--log-level",
        default="info",
        envvar="DAP_LOG_LEVEL",
        show_default=True,
        type=click.Choice(options.LOG_LEVELS),
    )(fn)
    return fn


@click.command()
@_common
@click.option("--mode", default="production", envvar="DAP_MODE", show_default=True)
@click.option("--addr", default=options.DEFAULT_ADDR, envvar="DAP_ADDR", show_default=True)
@click.option("--workspace", envvar="DAP_WORKSPACE", help="active workspace")
@click.option("--jwt-secret", envvar="DAP_JWT_SECRET", help="HS256 shared secret")
@click.option("--jwt-public-key", envvar="DAP_JWT_PUBLIC_KEY", help="PEM (text or file): RS256/ES256")
@click.option("--jwt-issuer", default=options.DEFAULT_ISSUER, envvar="DAP_JWT_ISSUER", show_default=True)
@click.option("--tls-cert", envvar="DAP_TLS_CERT")
@click.option("--tls-key", envvar="DAP_TLS_KEY")
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    envvar="DAP_CORS_ORIGIN",
    help="allowed origin; repeatable (env: space-separated)",
)
@click.option("--web-dir", envvar="DAP_WEB_DIR")
@click.option("--sidecar-endpoint", envvar="DAP_SIDECAR_ENDPOINT")
@click.option("--invoke-timeout", default="30s", envvar="DAP_INVOKE_TIMEOUT", show_default=True)
@click.option(
    "--ctx-listen",
    default=options.DEFAULT_CTX_LISTEN,
    envvar="DAP_CTX_LISTEN",
    show_default=True,
    help="the bridge's /ctx listener for the app process: loopback host:port or unix:///path",
)
@click.option(
    "--runtime",
    envvar="DAP_RUNTIME",
    help="child-process mode: start the app with python, node or php (optional :version)",
)
@click.option("--app-dir", envvar="DAP_APP_DIR", help="the app's directory (default {state-dir}/app)")
@click.option("--app-entrypoint", envvar="DAP_APP_ENTRYPOINT", help="default app.py, app.js or app.php")
@click.option(
    "--metrics-addr",
    default=options.DEFAULT_METRICS_ADDR,
    envvar="DAP_METRICS_ADDR",
    show_default=True,
    help="admin listener; empty = off",
)
@click.option(
    "--grpc-addr",
    default="",
    envvar="DAP_GRPC_ADDR",
    help="gRPC listener of the entities exposed over grpc (host:port); empty = off",
)
@click.option("--admin-secret", envvar="DAP_ADMIN_SECRET")
@click.option("--log-debug", is_flag=True, envvar="DAP_LOG_DEBUG")
@click.option(
    "--max-body-bytes",
    default=options.DEFAULT_MAX_BODY,
    envvar="DAP_MAX_BODY_BYTES",
    type=int,
    show_default=True,
)
@click.option(
    "--max-file-bytes",
    default=options.DEFAULT_MAX_FILE,
    envvar="DAP_MAX_FILE_BYTES",
    type=int,
    show_default=True,
    help="largest upload to a file field that declares no storage.max_bytes (413 past it)",
)
@click.option(
    "--pool-size", default=options.DEFAULT_POOL_SIZE, envvar="DAP_POOL_SIZE", type=int, show_default=True
)
@click.option(
    "--callback-allow",
    "callback_allow",
    multiple=True,
    envvar="DAP_CALLBACK_ALLOW",
    help="CIDR a job callback may reach although internal (loopback, private); repeatable",
)
@click.option("--callback-secret", envvar="DAP_CALLBACK_SECRET", help="whsec_… secret signing job callbacks")
@click.option(
    "--job-lease",
    default=options.DEFAULT_JOB_LEASE,
    envvar="DAP_JOB_LEASE",
    show_default=True,
    help="how long a job stays claimed without a heartbeat",
)
@click.option(
    "--metrics/--no-metrics",
    default=True,
    envvar="DAP_METRICS",
    show_default=True,
    help="serve /metrics on the admin listener (off: 404 OBSERVABILITY_METRICS_DISABLED)",
)
@click.option(
    "--debug-surface",
    is_flag=True,
    envvar="DAP_DEBUG_SURFACE",
    help="the admin listener's /debug/* (tasks, pool, profile), for the admin secret only",
)
@click.option(
    "--logs-file",
    envvar="DAP_LOGS_FILE",
    type=click.Path(dir_okay=False),
    help="also keep the logs window on disk, in rotating JSON-lines files here (/logs reads them)",
)
@click.option(
    "--logs-file-size",
    default="64MiB",
    envvar="DAP_LOGS_FILE_SIZE",
    show_default=True,
    help="bound of the --logs-file files together (bytes, or with k, M, G)",
)
def serve(**raw: Any) -> None:
    """Run the production server (REST, UI metadata, admin listener)."""
    keep_logs(raw)
    logs.configure("debug" if raw.get("log_debug") else raw["log_level"])
    if raw.get("log_debug"):
        log.warning("debug records enabled by --log-debug", extra={"ctx": {"audit": "log_debug_enabled"}})
    try:
        raw["jwt_public_key"] = _read_key(raw["jwt_public_key"])
        opts = options.check(**raw)
        if opts.jwt_public_key is not None:  # refuse a bad key before touching Postgres
            from dap.server.access import auth

            auth.JwtVerifier(issuer=opts.jwt_issuer, public_key_pem=opts.jwt_public_key)
        staged = stage_catalog(opts.spec)
    except errors.BootRefused as exc:
        _refuse(str(exc), exc.exit_code)
    tracing.configure("dap")  # OTEL_* variables; off (and never imported) unless they ask for traces
    try:
        loops.run(_serve(opts, staged))
    except errors.BootRefused as exc:
        _refuse(str(exc), exc.exit_code)
    except listening.ListenError as exc:  # an address in use, forbidden, not this machine's
        _refuse(str(exc))
    except OSError as exc:  # not a listener (those are ListenError): say what failed on which file
        _refuse(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc))
    finally:
        tracing.shutdown()  # export what is buffered


async def _serve(opts: options.ServeOptions, staged: StagedCatalog) -> None:
    started = time.perf_counter()

    def finish_loading() -> None:
        confirm_spec(staged.spec, opts.spec)
        import dap.server.web.app  # noqa: F401 -- the web stack, imported while Postgres works

    async def confirm() -> None:
        # Postgres creates the tables on its own core meanwhile; this thread holds the GIL only
        # for Python work, and the event loop needs it just to collect the DDL's answer
        await asyncio.to_thread(finish_loading)

    pool = await booting.open_database(opts, staged.catalog, confirm=confirm)
    from dap.server.access import auth
    from dap.server.web import app

    verifier = auth.JwtVerifier(
        issuer=opts.jwt_issuer, secret=opts.jwt_secret, public_key_pem=opts.jwt_public_key
    )
    server = app.assemble(opts, pool, staged.catalog, verifier)
    for attach in ATTACH:
        attach(server.app, opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except BaseException:
        await server.stop()
        raise
    click.echo(f"{server.banner()} (ready in {time.perf_counter() - started:.2f}s)", err=True)
    # everything built so far (catalog, modules, the app) lives as long as the process: moved out of
    # the collector's sight, a collection under load scans only what requests create
    gc.collect()
    gc.freeze()
    await stop.wait()
    click.echo("dap serve: shutting down (finishing in-flight requests)", err=True)
    await server.stop()


@click.command()
@_common
@click.option("--dry-run", is_flag=True, envvar="DAP_DRY_RUN", help="print the plan, change nothing")
def migrate(spec: str, dsn: str | None, log_level: str, dry_run: bool) -> None:
    """Print the schema migration plan and apply it, destructive steps included when declared."""
    logs.configure(log_level)
    try:
        dsn = options.check_dsn(dsn)
        catalog = load_catalog(Path(spec))
        asyncio.run(_migrate(dsn, catalog, dry_run=dry_run))
    except errors.ServerError as exc:
        _refuse(str(exc), getattr(exc, "exit_code", 1))


async def _migrate(dsn: str, catalog: Catalog, *, dry_run: bool) -> None:
    pool = await db.open_pool(dsn, 2)
    try:
        async with pool.acquire() as conn:
            plan = await schema_sync.current_plan(conn, catalog.tables, catalog.entities)
            click.echo(plan.render())
            if plan.blockers:
                raise errors.MigrationError(
                    "undeclared destructive changes block the migration; nothing was changed"
                )
            if dry_run or not plan.steps:
                click.echo("nothing applied" if dry_run else "schema is up to date")
                return
        await booting.prepare_database(pool, catalog, allow_destructive=True)
        from dap.server.storage import building

        built = await building.build(pool, catalog.tables)  # the online steps, waited for here
        click.echo(
            f"applied {len(plan.steps)} step(s)" + (f", {len(built)} index(es) built online" if built else "")
        )
    finally:
        await pool.close()


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--dsn", envvar="DAP_DSN", help="postgresql:// DSN (required)")
@click.option("--workspace", default="default", show_default=True, envvar="DAP_WORKSPACE")
@click.option(
    "--spec",
    "spec",
    default=None,
    envvar="DAP_SPEC",
    help="manifest directory (default: DIRECTORY, whose seed/ folder holds the records)",
)
@click.option(
    "--log-level",
    default="info",
    envvar="DAP_LOG_LEVEL",
    show_default=True,
    type=click.Choice(options.LOG_LEVELS),
)
def seed(directory: Path, dsn: str | None, workspace: str, spec: str | None, log_level: str) -> None:
    """Load seed records (DIRECTORY/seed/*.yaml|csv) into a workspace through the API's rules.

    One transaction: a bad row names its file, line and field and nothing is loaded. A second run
    adds nothing; a changed record is updated where the API allows it, else the run says why not.
    The database's schema is brought up to the manifests the way `dap serve` does at boot.
    """
    from dap.server.workflows import seeding, seeds

    logs.configure(log_level)
    spec_dir = Path(spec) if spec else directory
    seed_dir = directory / "seed" if (directory / "seed").is_dir() else directory
    try:
        dsn = options.check_dsn(dsn)
        catalog = load_catalog(spec_dir)
        rows = seeds.parse_files(_seed_files(seed_dir))
        if not rows:
            _refuse(f"no seed records in {seed_dir} (*.yaml, *.yml, *.csv)")
        report = asyncio.run(_seed(dsn, catalog, workspace, rows))
    except seeds.SeedFileError as exc:
        _refuse_problems(exc.problems)
    except seeding.SeedError as exc:
        _refuse_problems(exc.problems, str(exc))
    except errors.ServerError as exc:
        _refuse(str(exc), getattr(exc, "exit_code", 1))
    click.echo(f"seeded {workspace} from {seed_dir}: {report.summary()}")
    for note in report.notes:
        click.echo(f"  not applied: {note}")


def _seed_files(seed_dir: Path) -> list[tuple[str, str]]:
    from dap.server.workflows import seeds

    return [
        (path.relative_to(seed_dir).as_posix(), path.read_text())
        for path in sorted(seed_dir.rglob("*"))
        if path.is_file() and path.suffix in seeds.SUFFIXES
    ]


def _refuse_problems(problems: Sequence[Any], headline: str | None = None) -> NoReturn:
    for problem in problems:
        click.echo(f"dap seed: {problem}", err=True)
    _refuse(headline or f"{len(problems)} problem(s) in the seed files; nothing was loaded")


async def _seed(dsn: str, catalog: Catalog, slug: str, rows: Sequence[Any]) -> Any:
    from dap.server.storage import workspaces
    from dap.server.workflows import seeding

    pool = await db.open_pool(dsn, 2)
    try:
        await booting.prepare_database(pool, catalog)  # as `dap serve` boots: safe steps only
        async with pool.acquire() as conn:
            found = await workspaces.find(conn, slug)
            if found is None:
                raise errors.BootRefused(f"no workspace {slug!r} in this database: register it first")
            return await seeding.load(conn, catalog, found.tenant_id, rows)
    except errors.MigrationError as exc:
        raise errors.BootRefused(f"{exc}; run `dap migrate` first") from exc
    finally:
        await pool.close()


@click.command()
@click.option("--indent", type=int, default=2, show_default=True, help="indentation of the JSON output")
@click.option(
    "--proto",
    "proto_spec",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="print instead the .proto text of the gRPC services of this manifest directory",
)
@click.option(
    "--indexes",
    "index_spec",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="print instead every index of this manifest directory's tables, with the lists each serves",
)
def schema(indent: int, proto_spec: Path | None, index_spec: Path | None) -> None:
    """Print the JSON Schema (draft-07) of every manifest kind, or with --proto DIR the .proto text
    of the gRPC services DIR's entities expose (the schema `dap serve --grpc-addr` reflects), or
    with --indexes DIR the indexes of DIR's tables and the declared lists each serves."""
    if index_spec is not None:
        from dap.server.storage import indexing

        try:
            click.echo(indexing.render(load_catalog(index_spec).indexes))
        except errors.BootRefused as exc:
            _refuse(str(exc), exc.exit_code)
        return
    if proto_spec is None:
        from dap.config import cli as config_cli

        config_cli.schema.callback(indent)  # type: ignore[misc]
        return
    try:
        catalog = load_catalog(proto_spec)
    except errors.BootRefused as exc:
        _refuse(str(exc), exc.exit_code)
    from dap.server.rpc import descriptors

    click.echo(descriptors.proto_text(descriptors.files(catalog)))


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def validate(directory: Path) -> None:
    """Validate the manifests in DIRECTORY and summarise them; warn of a declared filter or sort
    that no index serves (``storage.indexing``)."""
    from dap.config import cli as config_cli
    from dap.config import loading

    config_cli.validate.callback(directory)  # type: ignore[misc]  # exits 1 when invalid
    catalog = Catalog.from_spec(loading.load_spec(directory))
    for warning in catalog.indexes.warnings:
        click.echo(f"warning: {warning}", err=True)
