"""A tiny app-side helper for the dap bridge (Python, aiohttp).

Write handlers ``async def reserve(ctx, request) -> dict`` keyed ``module/entity/action``; serve
them with :func:`serve` on the unix socket in ``SVC_APP_SOCKET`` (or a given ``unix:///path`` or
``http://127.0.0.1:PORT``). ``request`` is ``{resource_id, resource, params}``; return
``{data, new_state, events}`` (any of them). Raise to answer 500 ``{error}``: the server rolls
back the action and every /ctx write made through ``ctx``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web


class CtxError(Exception):
    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"/ctx answered {status}: {problem.get('detail', problem)}")
        self.status, self.problem = status, problem


class Ctx:
    """The /ctx calls of one invoke; ``joined=False`` commits each call by itself.
    ``idempotency_key``: the invoke's ``Idempotency-Key`` (a saga step's), else ``None``."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base: str,
        headers: dict[str, str],
        idempotency_key: str | None = None,
    ) -> None:
        self._session, self._base, self._headers = session, base, headers
        self.idempotency_key = idempotency_key

    async def call(self, primitive: str, op: str, joined: bool = True, **body: Any) -> Any:
        headers = dict(self._headers)
        if not joined:
            headers.pop("X-Svc-Scope-Id", None)
        async with self._session.post(f"{self._base}/ctx/{primitive}/{op}", json=body, headers=headers) as r:
            answer = await r.json(content_type=None)
            if r.status != 200:
                raise CtxError(r.status, answer or {})
            return answer

    def entity(self, op: str, named: str, key: str, **body: Any) -> Awaitable[Any]:
        return self.call("entity", op, named=named, key=key, **body)


Handler = Callable[[Ctx, dict[str, Any]], Awaitable[dict[str, Any] | None]]
_sessions: dict[str, aiohttp.ClientSession] = {}


def _session(ctx_url: str) -> tuple[aiohttp.ClientSession, str]:
    session = _sessions.get(ctx_url)
    if session is None:
        if ctx_url.startswith("unix:"):
            connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path="/" + ctx_url[5:].lstrip("/"))
        else:
            connector = aiohttp.TCPConnector()
        session = _sessions[ctx_url] = aiohttp.ClientSession(connector=connector)
    return session, "http://ctx" if ctx_url.startswith("unix:") else ctx_url


def app(handlers: dict[str, Handler]) -> web.Application:
    async def invoke(request: web.Request) -> web.Response:
        m = request.match_info
        handler = handlers.get(f"{m['module']}/{m['entity']}/{m['action']}")
        if handler is None:
            return web.json_response({"error": f"no handler for {request.path}"}, status=500)
        session, base = _session(request.headers["X-Svc-Ctx-Url"])
        # the invoke's W3C traceparent goes back on every /ctx call: they join the request's trace
        # (an app with an OpenTelemetry SDK would start its own span from it and send that instead)
        passed = ("X-Svc-Scope-Id", "X-Svc-Invoke-Id", "traceparent", "tracestate")
        ids = {k: request.headers[k] for k in passed if k in request.headers}
        try:
            ctx = Ctx(session, base, ids, request.headers.get("Idempotency-Key"))
            answer = await handler(ctx, await request.json())
        except Exception as exc:  # the server rolls the whole scope back
            return web.json_response({"error": str(exc) or exc.__class__.__name__}, status=500)
        return web.json_response(answer or {})

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def close(_app: web.Application) -> None:
        for session in _sessions.values():
            await session.close()

    application = web.Application()
    application.router.add_post("/invoke/{module}/{entity}/{action}", invoke)
    application.router.add_get("/health", health)
    application.on_cleanup.append(close)
    return application


def serve(handlers: dict[str, Handler], listen: str | None = None) -> None:
    """Serve until killed on ``listen``, ``SVC_APP_SOCKET``, or the first command-line argument."""
    listen = listen or os.environ.get("SVC_APP_SOCKET") or (sys.argv[1] if len(sys.argv) > 1 else "")
    if listen.startswith("unix:"):
        web.run_app(app(handlers), path="/" + listen[5:].lstrip("/"), print=None)
    elif listen.startswith("http://"):
        host, _, port = listen[len("http://") :].rpartition(":")
        web.run_app(app(handlers), host=host, port=int(port), print=None)
    else:
        sys.exit("usage: app.py unix:///path/app.sock | http://127.0.0.1:PORT (or set SVC_APP_SOCKET)")


__all__ = ["Ctx", "CtxError", "app", "serve"]
