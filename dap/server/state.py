"""Typed application state shared by the handlers: the ``web.AppKey`` of every shared object.

One module holds the keys so that handlers, the admin listener and the assembly in ``web.app``
agree on them without importing each other. The loaded spec is held through a
:class:`SpecHolder`: handlers read ``holder.current`` once per request, and a later swap (the
resource pod loading a new artifact) replaces that one reference atomically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web

if TYPE_CHECKING:
    from dap.server import catalog, metrics, options
    from dap.server.access import auth
    from dap.server.events import dispatcher, feed
    from dap.server.storage import caching, files, workspaces
    from dap.server.workflows import worker


@dataclass
class SpecHolder:
    """The one mutable cell: the loaded spec currently served."""

    current: catalog.Catalog

    def swap(self, new: catalog.Catalog) -> catalog.Catalog:
        """Serve ``new`` from the next request on; return the previous catalog."""
        old, self.current = self.current, new
        return old


POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
SPEC: web.AppKey[SpecHolder] = web.AppKey("spec", SpecHolder)
REGISTRY: web.AppKey[workspaces.Registry] = web.AppKey("registry")
METRICS: web.AppKey[metrics.Metrics] = web.AppKey("metrics")
VERIFIER: web.AppKey[auth.JwtVerifier] = web.AppKey("verifier")
OPTIONS: web.AppKey[options.ServeOptions] = web.AppKey("options")
CACHE: web.AppKey[caching.FindCache] = web.AppKey("find_cache")
# the file fields' store (``web.files`` sets it; a host, the resource pod, may root it elsewhere)
FILES: web.AppKey[files.FileStore] = web.AppKey("files")
# the process's job worker (``web.jobs.attach``): every protocol queues ``call: async`` actions on it
WORKER: web.AppKey[worker.Worker] = web.AppKey("job_worker")


@dataclass
class Events:
    """The process's events machinery: the dispatcher (started with the app unless turned off)
    and the feed of delivered events the websocket serves."""

    dispatcher: dispatcher.Dispatcher
    feed: feed.Feed

    def local_wake(self) -> Callable[[], None] | None:
        """The wake of this process's dispatcher when it runs, for a write to call after its commit
        (``operations.Call.wake``); ``None`` when it does not run: then the write NOTIFYs the
        processes that do."""
        return self.dispatcher.written if self.dispatcher.running else None


EVENTS: web.AppKey[Events] = web.AppKey("events")
# extra checks of the admin /health: each returns a reason when unhealthy, None when fine. The list
# is created with the app; a host (the resource pod) may append to it before or after start.
HealthCheck = Callable[[], Awaitable[str | None]]
HEALTH_CHECKS: web.AppKey[list[HealthCheck]] = web.AppKey("health_checks")
# the request id of a request (given or made by the middleware), for audit rows
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
# the resolved workspace slug of a request, for the metrics label
WORKSPACE: web.RequestKey[str] = web.RequestKey("workspace", str)
