"""The debug surface on the admin listener: ``/debug/tasks``, ``/debug/pool``, ``/debug/artifact``,
``/debug/workspaces`` and ``/debug/profile?seconds=N``.

Off unless the server runs with ``--debug-surface`` (``DAP_DEBUG_SURFACE``), and then only for the
admin secret (``Authorization: Bearer …``); otherwise every route answers 403
``OBSERVABILITY_DEBUG_FORBIDDEN`` (mounted either way, so that the answer says why rather than 404).

What it shows is the process's shape, never its contents: task names, their coroutines and the
file:line of each frame (no locals, no arguments); pool and cache sizes and counters; the loaded
spec's names (its declarations, not data); request counts per workspace slug (what ``/metrics``
shows already); a CPU profile's functions and times. No secret, DSN, token, header or record
value appears (``tests/server/test_observability.py`` looks for them in every answer).

The profile is ``cProfile`` on the event loop's thread, where every request, delivery and job
runs, for at most ``MAX_PROFILE`` seconds; one at a time (a second is 409). cProfile is in the
standard library and sees everything that thread runs; a sampling profiler (``yappi``,
``py-spy``) would add a dependency for no more than this needs.
"""

from __future__ import annotations

import asyncio
import cProfile
import hmac
import io
import pstats
import sys
from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.storage import db

CODE = "OBSERVABILITY_DEBUG_FORBIDDEN"
MAX_PROFILE = 60.0
PROFILING: web.AppKey[asyncio.Lock] = web.AppKey("debug_profiling", asyncio.Lock)


def _guard(request: web.Request) -> None:
    opts = request.app[state.OPTIONS]
    if not opts.debug_surface:
        raise errors.Forbidden(
            "the debug surface is off on this server: start it with --debug-surface (DAP_DEBUG_SURFACE=1) "
            "and call it with the admin secret",
            code=CODE,
        )
    secret = opts.admin_secret or ""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if (
        not secret
        or scheme.lower() != "bearer"
        or not hmac.compare_digest(token.strip().encode(), secret.encode())
    ):
        raise errors.Forbidden(
            "the debug surface is for the admin secret only: send 'Authorization: Bearer <admin secret>' "
            "(and start the server with --admin-secret)",
            code=CODE,
        )


def task_dump(tasks: set[asyncio.Task[Any]]) -> list[dict[str, Any]]:
    """Each task's name, coroutine, state and stack as file:line function (no locals, no arguments)."""
    found = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        coro = task.get_coro()
        frames = [
            f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_qualname}"
            for frame in task.get_stack(limit=20)
        ]
        found.append(
            {
                "name": task.get_name(),
                "coroutine": getattr(coro, "__qualname__", type(coro).__name__),
                "state": "done" if task.done() else "pending",
                "stack": frames,
            }
        )
    return found


async def _tasks(request: web.Request) -> web.Response:
    _guard(request)
    dump = task_dump(asyncio.all_tasks())
    return web.json_response({"count": len(dump), "tasks": dump})


async def _pool(request: web.Request) -> web.Response:
    _guard(request)
    pool = request.app[state.POOL]
    waiting, waits, waited = db.waits(pool)
    cache = request.app.get(state.CACHE)
    body: dict[str, Any] = {
        "pool": {
            "size": pool.get_size(),
            "idle": pool.get_idle_size(),
            "max": pool.get_max_size(),
            "waiting": waiting,
            "waits": waits,
            "waited_seconds": round(waited, 6),
        },
        "find_cache": None
        if cache is None
        else {"live": cache.live, "hits": cache.hits, "entries": len(getattr(cache, "_entries", {}))},
    }
    return web.json_response(body)


async def _artifact(request: web.Request) -> web.Response:
    _guard(request)
    catalog = request.app[state.SPEC].current
    opts = request.app[state.OPTIONS]
    body = {
        "spec": str(opts.spec),
        "entities": sorted(catalog.entities),
        "rest": sorted(catalog.resources),
        "grpc": sorted(catalog.grpc),
        "ws": sorted(catalog.ws),
        "services": sorted(catalog.services),
        "apps": sorted(catalog.apps),
        "workspaces": sorted(catalog.workspaces),
        "python": sys.version.split()[0],
    }
    return web.json_response(body)


async def _workspaces(request: web.Request) -> web.Response:
    _guard(request)
    counts = request.app[state.METRICS].per_workspace()
    return web.json_response({"data": [{"workspace": ws, **c} for ws, c in sorted(counts.items())]})


def profile_settings(query: dict[str, str]) -> tuple[float, str, int]:
    """(seconds, sort key, lines) of a ``/debug/profile`` query; 400 for seconds out of range."""
    try:
        seconds = float(query.get("seconds", "5"))
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_PROFILE:
        raise errors.BadRequest(
            f"seconds must be above 0 and at most {MAX_PROFILE:g}", code="SVC.REQUEST.MALFORMED"
        )
    sort = query.get("sort", "cumulative")
    top = query.get("top", "60")
    return seconds, sort if sort in _SORTS else "cumulative", int(top) if top.isdigit() else 60


async def _profile(request: web.Request) -> web.Response:
    _guard(request)
    seconds, sort, top = profile_settings(dict(request.query))
    lock = request.app[PROFILING]
    if lock.locked():
        raise errors.Conflict("a profile is running already: wait for it to end, then ask again")
    async with lock:
        profiler = cProfile.Profile()
        profiler.enable()  # the event loop's thread: every task of this process runs on it
        try:
            await asyncio.sleep(seconds)
        finally:
            profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(top)
    return web.Response(text=out.getvalue(), content_type="text/plain")


_SORTS = ("cumulative", "tottime", "ncalls")


def add_routes(app: web.Application) -> None:
    app[PROFILING] = asyncio.Lock()
    app.router.add_get("/debug/tasks", _tasks)
    app.router.add_get("/debug/pool", _pool)
    app.router.add_get("/debug/artifact", _artifact)
    app.router.add_get("/debug/workspaces", _workspaces)
    app.router.add_get("/debug/profile", _profile)
