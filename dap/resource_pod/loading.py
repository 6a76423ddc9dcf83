"""Loading a verified artifact into the running server, the atomic swap, and the self-check.

The "loaded" step of the spec: manifests parsed (``dap.config``) and turned into a server
``Catalog`` (entities registered, permission catalogue and UI manifests derived), the schema
synced with **safe steps only** — a pending destructive migration fails the step and the old
version keeps serving — and then the swap: one reference replaced in the server's
``SpecHolder``. A request reads that reference once, so requests in flight finish on the old
catalog and new ones see the new catalog; nothing restarts. Safe steps are additive (tables,
nullable columns, indexes), so the old catalog still works against the migrated schema during
the moment both are in use.

Parsing and catalog building are CPU work and run in a worker thread so that the server keeps
answering while a large artifact loads.

The self-check runs after the swap: every table of the new catalog answers a ``SELECT`` of the
columns the catalog will read, and the workspace's OpenAPI document is served over real HTTP by
the server itself. A failure there is a "later failure" of the spec: the caller swaps back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import aiohttp
import asyncpg
from aiohttp import web

from dap import config, server
from dap.resource_pod import errors
from dap.server.storage import building, db, schema_sync, tables, workspaces

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 10.0


class SelfCheck(Protocol):
    """An extra check of a freshly loaded catalog; raise to have it rolled back."""

    def __call__(self, catalog: server.Catalog) -> Awaitable[None]: ...


def empty_catalog() -> server.Catalog:
    return server.Catalog.build({})


def _build(files: Mapping[str, bytes]) -> server.Catalog:
    try:
        spec = config.load_files(dict(files))
    except config.SpecError as exc:
        first = exc.problems[0] if exc.problems else "no detail"
        raise errors.LoadError(
            f"the artifact's manifests are invalid ({len(exc.problems)} problem(s)); first: {first}"
        ) from exc
    return server.Catalog.from_spec(spec)


async def catalog_for(files: Mapping[str, bytes]) -> server.Catalog:
    """Parse the manifests among ``files`` into a catalog, off the event loop."""
    return await asyncio.to_thread(_build, files)


def _pool(app: web.Application) -> asyncpg.Pool:
    return app[server.state.POOL]


async def ensure_workspace(app: web.Application, slug: str) -> None:
    """Register the pod's workspace in the server's database unless it already is; its events
    dispatcher then delivers that workspace's events only (the pods of other workspaces may share
    the database, and only this pod's catalog has this workspace's event declarations)."""
    try:
        async with db.connection(_pool(app)) as conn:
            found = await workspaces.find(conn, slug)
            if found is None:
                found, _ = await workspaces.register(conn, slug, slug)
                log.info("workspace registered", extra={"ctx": {"workspace": slug}})
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.LoadError(f"cannot register workspace {slug!r}: {type(exc).__name__}: {exc}") from exc
    except server.errors.ServerError as exc:
        raise errors.ConfigError(f"workspace {slug!r} cannot be registered: {exc}") from exc
    app[server.state.REGISTRY].forget(slug)
    if found is not None and server.state.EVENTS in app:
        app[server.state.EVENTS].dispatcher.settings.tenants = frozenset({found.tenant_id})


async def migrate(app: web.Application, catalog: server.Catalog) -> int:
    """Apply the safe schema steps of ``catalog``; return how many ran. Never destructive."""
    try:
        async with db.connection(_pool(app)) as conn:
            plan = await schema_sync.sync(conn, catalog.tables, catalog.entities, allow_destructive=False)
    except server.errors.DestructivePending as exc:
        raise errors.DestructivePending(str(exc)) from exc
    except server.errors.MigrationError as exc:
        raise errors.LoadError(f"schema sync failed: {exc}") from exc
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.LoadError(f"schema sync failed: {type(exc).__name__}: {exc}") from exc
    if any(step.online for step in plan.steps):  # indexes on filled tables: built while serving
        task = asyncio.create_task(building.build(_pool(app), catalog.tables))
        _BUILDS.add(task)
        task.add_done_callback(_BUILDS.discard)
    return len(plan.steps)


_BUILDS: set[asyncio.Task[list[str]]] = set()  # online index builds under way (kept from the collector)


async def refused_steps(app: web.Application, catalog: server.Catalog) -> list[str]:
    """The schema changes ``catalog`` needs that :func:`migrate` refuses (destructive ones)."""
    async with db.connection(_pool(app)) as conn:
        plan = await schema_sync.current_plan(conn, catalog.tables, catalog.entities)
    return [*plan.blockers, *(step.description for step in plan.destructive)]


async def ensure_calendar(app: web.Application, slug: str, catalog: server.Catalog) -> int:
    """Create the accounting periods the deployed spec's calendar declares for ``slug`` up to the
    current one (``workflows.calendars``, idempotent); a failure is logged, not fatal: periods can
    still be created through the API, and the next deployment tries again."""
    from dap.server.workflows import calendars  # the deployment's own step, loaded when it runs

    try:
        async with db.connection(_pool(app)) as conn:
            found = await workspaces.find(conn, slug)
            if found is None:
                return 0
            return await calendars.ensure_workspace(conn, catalog, slug, found.tenant_id)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.error(
            "cannot create the declared accounting periods",
            extra={"ctx": {"workspace": slug, "error": f"{type(exc).__name__}: {exc}"}},
        )
        return 0


async def request_grants(app: web.Application, slug: str, catalog: server.Catalog, by: str) -> int:
    """Ask the owners of what the deployed artifact's apps consume for their grants (pending
    grant requests in the workspace, ``workflows.granting``); how many were new or changed. A
    failure is logged, not fatal: the calls stay refused until the next deployment asks."""
    from dap.server.workflows import granting  # the deployment's own step, loaded when it runs

    try:
        async with db.connection(_pool(app)) as conn:
            found = await workspaces.find(conn, slug)
            if found is None:
                return 0
            return await granting.request_all(conn, found.tenant_id, granting.asks(catalog), by)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.error(
            "cannot record the artifact's grant requests",
            extra={"ctx": {"workspace": slug, "error": f"{type(exc).__name__}: {exc}"}},
        )
        return 0


def swap(app: web.Application, catalog: server.Catalog) -> server.Catalog:
    """Serve ``catalog`` from the next request on; return the catalog it replaces."""
    return app[server.state.SPEC].swap(catalog)


def current(app: web.Application) -> server.Catalog:
    return app[server.state.SPEC].current


async def probe_tables(app: web.Application, catalog: server.Catalog) -> None:
    """Every table the catalog reads answers a SELECT of its columns."""
    try:
        async with db.connection(_pool(app)) as conn:
            for table in catalog.tables:
                columns = ", ".join(tables.quote(c.name) for c in table.columns)
                await conn.fetch(f"SELECT {columns} FROM {tables.quote(table.name)} WHERE false")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise errors.SelfCheckFailed(f"table probe failed: {type(exc).__name__}: {exc}") from exc


async def probe_http(
    session: aiohttp.ClientSession, api_url: str, workspace: str, catalog: server.Catalog
) -> None:
    """The server answers the workspace's OpenAPI document and it lists every REST resource."""
    url = f"{api_url}/{workspace}/api/openapi.json"
    try:
        async with session.get(
            url, ssl=False, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
        ) as response:
            status = response.status
            document = await response.json(content_type=None) if status == 200 else None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        raise errors.SelfCheckFailed(f"probe {url} failed: {type(exc).__name__}: {exc}") from exc
    if status != 200 or not isinstance(document, dict):
        raise errors.SelfCheckFailed(f"probe {url} answered {status}")
    paths = document.get("paths") or {}
    missing = [
        key
        for key, resource in catalog.resources.items()
        if resource.actions & {"list", "create"} and f"/api/{resource.module}/{resource.name}" not in paths
    ]
    if missing:
        raise errors.SelfCheckFailed(f"probe {url}: the served API lacks {', '.join(sorted(missing))}")


ApiUrl = Callable[[], str | None]


def local_url(url: str) -> str:
    """``http://0.0.0.0:8080`` → ``http://127.0.0.1:8080`` (a wildcard bind is reached on loopback)."""
    return url.replace("://0.0.0.0:", "://127.0.0.1:").replace("://[::]:", "://[::1]:")
