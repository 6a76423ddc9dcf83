"""The admin listener: ``/metrics``, ``/health`` and, with an admin secret, ``/workspaces`` and
``/dead-letters`` (listing, ``POST /dead-letters/{id}/replay``) and ``/logs`` (``admin_logs``);
``/debug/*`` (``admin_debug``) when ``--debug-surface`` enables it, for the admin secret only.

It binds to loopback by default (``--metrics-addr``, empty = off) and is a separate aiohttp
application so that nothing of the tenant-facing API is reachable here and vice versa. Without
``--admin-secret`` the ``/workspaces`` routes are not mounted at all (404, not 401); with it,
every ``/workspaces`` request, reads included, needs ``Authorization: Bearer <secret>``, compared
in constant time. Registering answers the workspace's one-time first-admin setup code while its
setup is still open (no user, no data); ``POST /workspaces/{slug}/setup-code`` replaces it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dap.server import errors, metrics, state
from dap.server.access import accounts
from dap.server.events import deadletter, outbox, slots
from dap.server.storage import db, workspaces
from dap.server.web import admin_debug, admin_logs, requests
from dap.server.workflows import calendars, granting, jobs

log = logging.getLogger(__name__)
HEALTH_TIMEOUT = 2.0


def _problem_middleware() -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except errors.ApiError as exc:
            return errors.problem_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return errors.problem_response(errors.from_http_exception(exc))

    return middleware


async def _metrics(request: web.Request) -> web.Response:
    if not request.app[state.OPTIONS].metrics:
        raise errors.NotFound(
            "metrics are turned off on this server (--no-metrics / DAP_METRICS=false): "
            "start it with --metrics to scrape /metrics",
            code="OBSERVABILITY_METRICS_DISABLED",
        )
    meter = request.app[state.METRICS]
    meter.backlog(await _backlog(request.app[state.POOL]))
    body = meter.exposition()
    return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})


async def _backlog(pool: asyncpg.Pool) -> dict[str, float]:
    """The gauges read from Postgres at scrape time; none when Postgres is slow or away (the
    scrape still answers the rest)."""
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT), db.connection(pool) as conn:
            pending, oldest = await outbox.backlog(conn)
            kept, lost = await slots.retained(conn)
            queued, running = await jobs.depth(conn)
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.warning("metrics: backlog gauges not read", extra={"ctx": {"error": exc.__class__.__name__}})
        return {}
    return {
        "dap_events_pending": pending,
        "dap_events_oldest_pending_seconds": oldest,
        "dap_events_slot_retained_bytes": kept,
        "dap_events_slots_lost": lost,
        "dap_jobs_queued": float(queued),
        "dap_jobs_running": float(running),
    }


async def _health(request: web.Request) -> web.Response:
    reasons: list[str] = []
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT):
            async with db.connection(request.app[state.POOL]) as conn:
                await conn.fetchval("SELECT 1")
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reasons.append(f"postgres unreachable: {exc.__class__.__name__}")
    for check in request.app[state.HEALTH_CHECKS]:
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT):
                reason = await check()
        except TimeoutError:
            reason = f"health check {getattr(check, '__name__', 'check')} timed out"
        if reason:
            reasons.append(reason)
    body = {
        "status": "unhealthy" if reasons else "ok",
        "reasons": reasons,
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return web.json_response(body, status=503 if reasons else 200)


def _check_bearer(request: web.Request) -> None:
    secret = request.app[state.OPTIONS].admin_secret or ""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), secret.encode()):
        raise errors.Unauthorized("the admin endpoints need 'Authorization: Bearer <admin secret>'")


async def _list(request: web.Request) -> web.Response:
    _check_bearer(request)
    async with db.connection(request.app[state.POOL]) as conn:
        found = await workspaces.list_active(conn)
    return web.json_response({"data": [w.as_json() for w in found]})


async def _register(request: web.Request) -> web.Response:
    _check_bearer(request)
    body = await requests.read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("slug"), str):
        raise errors.ValidationFailed(
            "expected {slug: string, name: string}", errors=[errors.FieldProblem("slug", "required string")]
        )
    slug: str = body["slug"]
    name = body.get("name") or slug
    if not isinstance(name, str):
        raise errors.ValidationFailed("name must be a string", errors=[errors.FieldProblem("name", "string")])
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        workspace, created = await workspaces.register(conn, slug, name)
        code = await _setup_code(request, conn, workspace.tenant_id)
        # the served apps ask each other's owners in the new workspace too (issue 47)
        asks = granting.asks(request.app[state.SPEC].current)
        await granting.request_all(conn, workspace.tenant_id, asks, f"registration of workspace {slug}")
        # its declared accounting calendar: the periods up to the current month (issue 43)
        await calendars.ensure_workspace(conn, request.app[state.SPEC].current, slug, workspace.tenant_id)
    request.app[state.REGISTRY].forget(slug)
    log.info("workspace registered", extra={"ctx": {"workspace": slug, "created": created}})
    answer: dict[str, Any] = {"slug": workspace.slug, "created": created, "name": workspace.name}
    if code is not None:  # only while the first admin can still be set up
        answer |= {"setup_code": code, "setup_code_expires_in": accounts.SETUP_CODE_TTL}
    return web.json_response(answer, status=201)


async def _setup_code(request: web.Request, conn: db.Connection, tenant: uuid.UUID) -> str | None:
    """A fresh first-admin setup code, or ``None`` once the workspace has a user or data."""
    tables = [t.name for t in request.app[state.SPEC].current.tables if t.kind == "entity"]
    if await accounts.has_users(conn, tenant) or await workspaces.has_rows(conn, tables, tenant):
        await accounts.close_setup(conn, tenant)
        return None
    return await accounts.issue_setup_code(conn, tenant)


async def _new_setup_code(request: web.Request) -> web.Response:
    """``POST /workspaces/{slug}/setup-code``: replace the workspace's setup code (the old one dies)."""
    _check_bearer(request)
    slug = request.match_info["slug"]
    workspace = await request.app[state.REGISTRY].resolve(slug)
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        code = await _setup_code(request, conn, workspace.tenant_id)
    if code is None:
        raise errors.Conflict(
            f"workspace {slug!r} already has a user or data, so its setup is closed", code="SVC.SETUP.CLOSED"
        )
    return web.json_response(
        {"slug": slug, "setup_code": code, "setup_code_expires_in": accounts.SETUP_CODE_TTL}, status=201
    )


async def _unregister(request: web.Request) -> web.Response:
    _check_bearer(request)
    slug = request.match_info["slug"]
    async with db.connection(request.app[state.POOL]) as conn:
        found = await workspaces.unregister(conn, slug)
    request.app[state.REGISTRY].forget(slug)
    if not found:
        raise errors.NotFound(f"no workspace {slug!r}", code="SVC.WORKSPACE.NOT_FOUND")
    log.info("workspace unregistered", extra={"ctx": {"workspace": slug}})
    return web.Response(status=204)


async def _dead_letters(request: web.Request) -> web.Response:
    """``GET /dead-letters``: the latest dead event deliveries (``?limit=``, at most 500)."""
    _check_bearer(request)
    limit = (
        min(500, max(1, int(request.query.get("limit", "100"))))
        if request.query.get("limit", "100").isdigit()
        else 100
    )
    async with db.connection(request.app[state.POOL]) as conn:
        found = await deadletter.listing(conn, limit)
    return web.json_response({"data": found})


async def _replay(request: web.Request) -> web.Response:
    """``POST /dead-letters/{id}/replay``: deliver a dead delivery again (see ``events.deadletter``)."""
    _check_bearer(request)
    try:
        dead_id = uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        raise errors.NotFound("no such dead letter", code="SVC.EVENT.DEAD_LETTER_NOT_FOUND") from exc
    async with db.connection(request.app[state.POOL]) as conn:
        found = await deadletter.replay(conn, dead_id)
    return web.json_response(found, status=202)


async def _logs(request: web.Request) -> web.Response:
    """``GET /logs?filter=…&since=…&limit=…``: the process's recent log lines (``admin_logs``)."""
    _check_bearer(request)
    return await admin_logs.handler(request)


def build(main: web.Application) -> web.Application:
    """The admin application, sharing the main application's pool, registry and metrics."""
    app = web.Application(middlewares=[_problem_middleware()])
    app[state.POOL] = main[state.POOL]
    app[state.REGISTRY] = main[state.REGISTRY]
    app[state.METRICS] = main[state.METRICS]
    app[state.OPTIONS] = main[state.OPTIONS]
    app[state.SPEC] = main[state.SPEC]  # the same holder: a swap shows up here
    app[state.HEALTH_CHECKS] = main[state.HEALTH_CHECKS]  # the same list: appends show up here
    if state.CACHE in main:
        app[state.CACHE] = main[state.CACHE]
    admin_debug.add_routes(app)  # 403 OBSERVABILITY_DEBUG_FORBIDDEN unless enabled, then admin only
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    if main[state.OPTIONS].admin_secret:
        app.router.add_get("/workspaces", _list)
        app.router.add_post("/workspaces", _register)
        app.router.add_delete("/workspaces/{slug}", _unregister)
        app.router.add_post("/workspaces/{slug}/setup-code", _new_setup_code)
        app.router.add_get("/dead-letters", _dead_letters)
        app.router.add_post("/dead-letters/{id}/replay", _replay)
        app.router.add_get("/logs", _logs)
    return app
