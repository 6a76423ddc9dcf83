"""Assembly: pool, schema, workspaces, the main application, the admin listener, the runners.

Boot order is the order of refusals: options were checked by ``options.check``; here the pool is
opened (unreachable Postgres refuses the boot), the platform tables are ensured, the migration
plan is applied or the boot refused (destructive steps wait for ``dap migrate``), ``default`` is
seeded, and only then are the applications built, with every shared object set before they
freeze. :class:`Server` runs both listeners and shuts down gracefully: the sites stop accepting,
in-flight requests get ``shutdown_timeout`` seconds, then the pool closes.

The loaded spec sits in a :class:`state.SpecHolder`; the resource pod swaps it with
``app[state.SPEC].swap(catalog)`` after migrating for the new catalog.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from collections.abc import Awaitable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web
from aiohttp.typedefs import Handler

from dap import listening, tracing
from dap.server import booting, errors, metrics, options, state
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.events import brokers, channels, dispatcher, feed, measures
from dap.server.storage import building, caching, db, guarding, workspaces
from dap.server.web import (
    admin,
    approvals,
    archive,
    assets,
    files,
    grants,
    imports,
    jobs,
    methods,
    moves,
    notifications,
    oidc,
    openapi,
    passwords,
    periods,
    protocol,
    rest,
    sagas,
    sockets,
    trails,
    ui_meta,
    users,
)
from dap.server.workflows import sidecars

log = logging.getLogger(__name__)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
PREFLIGHT_MAX_AGE = "600"
CORS_ALLOW_HEADERS = "Authorization, Content-Type, If-Match, X-Request-Id, Idempotency-Key, X-Callback-Url"
CORS_EXPOSE_HEADERS = "ETag, Location, X-Request-Id"


# re-exported: the package's public face, ``dap migrate`` and the resource pod call it from here
prepare_database = booting.prepare_database
tls_context = booting.tls_context


BUNDLE = Path(__file__).parent / "bundle"  # ``make ui`` builds ui/ here; the package ships it
FILES = files.FILES  # the file fields' store: a host (the resource pod) may root it elsewhere


def find_web_dir(given: Path | None) -> Path | None:
    """The UI bundle: ``--web-dir``, else the bundle built into the package; ``None`` = API only."""
    candidates = [given] if given is not None else [BUNDLE]
    for candidate in candidates:
        if candidate is not None and (candidate / "index.html").is_file():
            return candidate
    return None


def _route_template(match_info: web.UrlMappingMatchInfo | None) -> str:
    """The metrics label of a request's route: its path template, ``unmatched`` for none."""
    resource = match_info.route.resource if match_info is not None else None
    return resource.canonical if resource is not None else "unmatched"


def _cors_headers(origin: str) -> dict[str, str]:
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Expose-Headers": CORS_EXPOSE_HEADERS,
        "Vary": "Origin",
    }


def _request_ids() -> Iterator[str]:
    """Ids for requests that bring none: 32 hex digits like a uuid4's, a random prefix per process
    and a counter (unique without the 16 random bytes and the ``UUID`` object of ``uuid4`` each)."""
    prefix = os.urandom(8).hex()
    return (f"{prefix}{n:016x}" for n in itertools.count())


def _front(app: web.Application, opts: options.ServeOptions, meter: metrics.Metrics) -> protocol.Front:
    """What runs around every request of ``app``: request id, CORS, problem documents, metrics and,
    with tracing on, the request's server span (continuing an incoming ``traceparent``).

    It is the server's handler in front of the application's own (``protocol.FRONT``), not an
    aiohttp middleware: aiohttp wraps an application's middlewares in one more of its own
    (``_fix_request_current_app``, for sub-applications, which this one has none of) and looks the
    chain up per request. Everything the router and the handlers raise reaches it, as it reached
    the middleware: an unknown path's 404 and a method's 405 are problem documents as well.
    """
    allowed = frozenset(opts.cors_origins)
    new_id = _request_ids().__next__
    router = app.router

    def traced(handler: Handler, request: web.Request) -> Awaitable[web.StreamResponse]:
        # a function, not a coroutine around ``answer``: a frame less on every resumption
        parent = request.headers.get(tracing.TRACEPARENT)  # an incoming trace is continued
        return answer(handler, request, tracing.span(request.method, kind="server", parent=parent))

    async def answer(
        handler: Handler, request: web.Request, server_span: AbstractContextManager[Any] | None = None
    ) -> web.StreamResponse:
        """``server_span`` (tracing on): the request's, current while it is answered."""
        span = None if server_span is None else server_span.__enter__()
        try:
            started = time.perf_counter()
            given = request.headers.get("X-Request-Id", "")
            request_id = given if given and _REQUEST_ID.fullmatch(given) else new_id()
            request[state.REQUEST_ID] = request_id
            origin = request.headers.get("Origin")
            response: web.StreamResponse
            matched: web.UrlMappingMatchInfo | None = None
            try:
                if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
                    matched = await router.resolve(request)  # for the metrics label only
                    if origin not in allowed:
                        raise errors.Forbidden(
                            "origin not allowed by the CORS allow-list", code="SVC.CORS.ORIGIN"
                        )
                    response = web.Response(
                        status=204,
                        headers={
                            **_cors_headers(origin),
                            "Access-Control-Allow-Methods": "GET, POST, PATCH, DELETE, OPTIONS",
                            "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
                            "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
                        },
                    )
                else:
                    response = await handler(request)
            except errors.ApiError as exc:
                response = errors.problem_response(exc, request_id=request_id)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = errors.problem_response(errors.from_http_exception(exc), request_id=request_id)
            except db.UNREACHABLE as exc:  # nothing was committed: see storage.db
                log.warning(
                    "postgres unreachable", extra={"ctx": {"request_id": request_id, "error": repr(exc)}}
                )
                unavailable = errors.ServiceUnavailable(
                    f"Postgres is unreachable; nothing was changed: try again in {db.RETRY_AFTER} s",
                    retry_after=db.RETRY_AFTER,
                    code="SVC.DB.UNAVAILABLE",
                )
                response = errors.problem_response(unavailable, request_id=request_id)
            except Exception:
                log.exception(
                    "unhandled error", extra={"ctx": {"request_id": request_id, "path": request.path}}
                )
                response = errors.problem_response(
                    errors.InternalError(f"internal error; quote request id {request_id}"),
                    request_id=request_id,
                )
            if origin is not None and origin in allowed:
                response.headers.update(_cors_headers(origin))
            response.headers.setdefault("X-Request-Id", request_id)
            workspace = request.get(state.WORKSPACE, "_none")
            # the router's answer, set on the request by the application's handler (none when it
            # never ran: a preflight, whose route was resolved above)
            route = _route_template(matched or protocol.matched(request))
            seconds = time.perf_counter() - started
            meter.observe(
                workspace=workspace,
                route=route,
                method=request.method,
                status=response.status,
                seconds=seconds,
            )
            if tracing.recording(span):  # not for a trace the sampler dropped
                attributes = {
                    "http.request.method": request.method,
                    "http.route": route,
                    "http.response.status_code": response.status,
                    "dap.workspace": workspace,
                    "dap.request_id": request_id,
                }
                tracing.served(span, f"{request.method} {route}", attributes, response.status)
            if log.isEnabledFor(logging.DEBUG):  # never bodies or values: masked fields stay out of logs
                ctx = {
                    "request_id": request_id,
                    "workspace": workspace,
                    "route": route,
                    "method": request.method,
                    "status": response.status,
                    "ms": round(seconds * 1000, 2),
                }
                log.debug("request", extra={"ctx": ctx})
        except BaseException as exc:
            if server_span is not None:
                server_span.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if server_span is not None:
            server_span.__exit__(None, None, None)
        return response

    # chosen once: a process's tracing is configured before its application is built
    return traced if tracing.enabled() else answer


async def _start_find_cache(app: web.Application) -> None:
    """Listen for invalidations at boot when the spec caches an entity (else on the first cached find)."""
    cache = app[state.CACHE]
    if cache.listener is not None and any(
        r.cache_ttl is not None for r in app[state.SPEC].current.resources.values()
    ):
        cache.listener.start()


async def _stop_find_cache(app: web.Application) -> None:
    listener = app[state.CACHE].listener
    if listener is not None:
        await listener.stop()


def _events(app: web.Application, opts: options.ServeOptions, pool: asyncpg.Pool) -> state.Events:
    """The dispatcher and the feed of this process (started with the app: see ``_start_events``).

    ``DAP_WEBHOOK_SECRET`` (``whsec_…``) signs webhooks declared ``sign: true``; a webhook's
    ``url_from_config: KEY`` reads ``DAP_CONFIG_KEY``; pubsub goes to the spec's ``nats``
    Datastore, or ``DAP_NATS_URL`` over it (``events.brokers``), else Postgres NOTIFY.
    """
    config = {
        k.removeprefix("DAP_CONFIG_").lower(): v for k, v in os.environ.items() if k.startswith("DAP_CONFIG_")
    }
    deliveries = channels.Channels(
        webhook_secret=os.environ.get("DAP_WEBHOOK_SECRET") or None,
        config=config,
        runner=booting.reliable_runner(lambda: app[state.SPEC].current, lambda: app.get(sidecars.INVOKER)),
        broker=brokers.broker(brokers.read_declared(opts.spec), os.environ),
    )
    counters = measures.Counters(app[state.METRICS].registry)
    entities = lambda: dict(app[state.SPEC].current.entities)  # noqa: E731 -- read per batch
    return state.Events(
        dispatcher.Dispatcher(pool, opts.dsn, entities, deliveries, counters), feed.Feed(pool, opts.dsn)
    )


async def _start_events(app: web.Application) -> None:
    events = app[state.EVENTS]
    events.dispatcher.channels.http = aiohttp.ClientSession()
    broker = events.dispatcher.channels.broker
    if broker is not None:  # pubsub on NATS instead of Postgres NOTIFY
        events.dispatcher.channels.nats = await channels.nats_publisher(broker)
    if os.environ.get("DAP_EVENTS_DISPATCH", "1") != "0":  # 0: this process delivers nothing
        events.dispatcher.start()
    events.feed.start()


async def _stop_events(app: web.Application) -> None:
    events = app[state.EVENTS]
    await events.dispatcher.stop()
    await events.feed.stop()
    if events.dispatcher.channels.http is not None:
        await events.dispatcher.channels.http.close()
    await channels.close_nats(events.dispatcher.channels.nats)


def build_app(
    *,
    opts: options.ServeOptions,
    pool: asyncpg.Pool,
    catalog: Catalog,
    verifier: auth.JwtVerifier,
    web_dir: Path | None = None,
) -> web.Application:
    """The tenant-facing application (REST, UI metadata, setup, login, OpenAPI, UI bundle)."""
    meter = metrics.Metrics()
    meter.watch_pool(
        lambda: (pool.get_size(), pool.get_idle_size(), pool.get_max_size()), lambda: db.waits(pool)
    )
    meter.registry.register(guarding.GuardCollector())  # lists no index serves (storage.guarding)
    meter.registry.register(building.ProgressCollector())  # online index builds (storage.building)
    app = web.Application(client_max_size=opts.max_body_bytes)
    app[protocol.FRONT] = _front(app, opts, meter)  # run by the server in front of the app's handler
    app[state.OPTIONS] = opts
    app[state.POOL] = pool
    app[state.SPEC] = state.SpecHolder(catalog)
    app[state.REGISTRY] = workspaces.Registry(pool)
    app[state.METRICS] = meter
    app[state.VERIFIER] = verifier
    app[state.HEALTH_CHECKS] = []
    app[state.CACHE] = caching.FindCache(opts.dsn)  # its listener connection opens on start
    app.on_startup.append(_start_find_cache)
    app.on_cleanup.append(_stop_find_cache)
    app[state.EVENTS] = _events(app, opts, pool)
    app.on_startup.append(_start_events)
    app.on_cleanup.append(_stop_events)
    # indexes on tables that hold rows already: built concurrently while the server serves
    builder = building.Builder(pool, catalog.tables)

    async def start_builds(_app: web.Application) -> None:
        builder.start()

    async def stop_builds(_app: web.Application) -> None:
        await builder.stop()

    app.on_startup.append(start_builds)
    app.on_cleanup.append(stop_builds)
    # entity routes first: the router tries dynamic routes in order, and these carry the load
    imports.add_routes(app)  # before rest: …/{entity}/_import is not a record id
    rest.add_routes(app)  # they leave /{ws}/api/_approvals… and /{ws}/api/_notifications… alone
    notifications.add_routes(app)
    app[sockets.SOCKETS] = set()
    app.on_shutdown.append(sockets.close_all)
    app.router.add_get("/{ws}/_ws", sockets.handler)
    approvals.add_routes(app)
    grants.add_routes(app)  # /{ws}/api/_grants…, /{ws}/api/_apps/… (service calls through an app)
    periods.add_routes(app)
    archive.add_routes(app)
    trails.add_routes(app)  # before moves: /{id}/_audit is not an action
    jobs.add_routes(app)  # GET …/_jobs/{id}
    sagas.add_routes(app)  # /{ws}/api/_sagas…
    files.add_routes(app)  # before moves: /{id}/_files/… is not an action
    methods.add_routes(app)  # the 405s of the three above, before moves' POST …/{id}/{action}
    moves.add_routes(app)
    app.router.add_get("/{ws}/api/openapi.json", openapi.handler)
    ui_meta.add_routes(app)
    app.router.add_post("/{ws}/_ui/setup", users.setup)
    app.router.add_post("/{ws}/_ui/login", users.login)
    oidc.add_routes(app)  # sign-in through the workspace's OpenID providers
    passwords.add_routes(app)  # local users: change, reset by mailed link
    if web_dir is not None:
        bundle = assets.Bundle(web_dir)  # gzip, immutable hashed assets, a revalidated index
        assets.add_routes(app, bundle)

        async def ui(request: web.Request) -> web.Response:
            await request.app[state.REGISTRY].resolve(request.match_info["ws"])
            return bundle.index(request)

        app.router.add_get("/{ws}/", ui)

    jobs.attach(app, opts)  # the job worker stops before the pool closes
    sagas.attach(app, opts)  # the saga engine, beside it

    async def close_pool(_app: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)
    return app


@dataclass
class Server:
    """Both listeners of one process; ``start`` then ``stop`` (graceful)."""

    app: web.Application
    opts: options.ServeOptions
    web_dir: Path | None
    shutdown_timeout: float = 30.0

    def __post_init__(self) -> None:
        self._runners: list[web.AppRunner] = []
        self.urls: dict[str, str] = {}

    async def start(self) -> None:
        context = tls_context(self.opts)
        main = protocol.AppRunner(self.app, access_log=None, shutdown_timeout=self.shutdown_timeout)
        # kept before its setup: a start-up hook that fails (a gRPC address in use) leaves what the
        # hooks before it started (the pool, the workers, their sessions) for ``stop`` to clean up
        self._runners.append(main)
        await main.setup()
        addr = self.opts.addr
        site = web.TCPSite(main, addr.host, addr.port, ssl_context=context)
        await listening.start(site, "the API listener, --addr", listening.address(addr.host, addr.port))
        self.urls["api"] = _url(main, "https" if context else "http")
        if self.opts.metrics_addr is not None:
            admin_runner = protocol.AppRunner(admin.build(self.app), access_log=None, shutdown_timeout=5.0)
            self._runners.append(admin_runner)
            await admin_runner.setup()
            metrics = self.opts.metrics_addr
            admin_site = web.TCPSite(admin_runner, metrics.host, metrics.port)
            where = listening.address(metrics.host, metrics.port)
            await listening.start(admin_site, "the admin listener, --metrics-addr", where)
            self.urls["admin"] = _url(admin_runner, "http")

    async def stop(self) -> None:
        for runner in reversed(self._runners):  # admin first, then the main app (closes the pool)
            await runner.cleanup()
        self._runners.clear()
        if self.app.on_startup.frozen and not self.app.frozen:
            await _clean_up_a_failed_start(self.app)

    def banner(self) -> str:
        ui = f"UI from {self.web_dir}" if self.web_dir is not None else "API only (no UI bundle found)"
        admin_part = f", admin {self.urls['admin']}" if "admin" in self.urls else ", admin listener off"
        return f"dap serve: listening on {self.urls.get('api')} — {ui}{admin_part}"


async def _clean_up_a_failed_start(app: web.Application) -> None:
    """aiohttp runs ``on_cleanup`` only for an app whose start-up completed; one that failed part
    way (a gRPC address in use) has started the pool's users (the event feed and dispatcher, the
    job worker) all the same, and they must stop before the pool closes. Each cleanup runs on its
    own: those of the hooks that never ran may fail, and must not keep the others from running."""
    for cleanup in list(app.on_cleanup):
        try:
            await cleanup(app)
        except Exception as exc:  # a part that never started
            log.debug("cleanup after a failed start: %r", exc)


def _url(runner: web.AppRunner, scheme: str) -> str:
    addresses = runner.addresses
    host, port = addresses[0][0], addresses[0][1]
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


async def create_server(opts: options.ServeOptions, catalog: Catalog) -> Server:
    """Open the pool, migrate safely, seed; return a :class:`Server` ready to ``start``."""
    oidc.check_declarations(catalog)  # before the pool opens: a refusal leaves nothing open
    verifier = auth.JwtVerifier(
        issuer=opts.jwt_issuer, secret=opts.jwt_secret, public_key_pem=opts.jwt_public_key
    )
    pool = await booting.open_database(opts, catalog)
    return assemble(opts, pool, catalog, verifier)


def assemble(
    opts: options.ServeOptions, pool: asyncpg.Pool, catalog: Catalog, verifier: auth.JwtVerifier
) -> Server:
    """The :class:`Server` over a pool whose database ``booting`` has prepared."""
    web_dir = find_web_dir(opts.web_dir)
    app = build_app(opts=opts, pool=pool, catalog=catalog, verifier=verifier, web_dir=web_dir)
    return Server(app, opts, web_dir)
