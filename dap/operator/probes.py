"""The operator's own HTTP endpoints: ``/healthz`` and ``/readyz`` on the probe address,
``/metrics`` (Prometheus text) on the metrics address.

Liveness answers while the event loop turns; readiness answers 200 only once the operator has
logged in, attached its caches and kopf has started handling, so that a rolling update of the
operator does not send traffic (or a leader lease) to a replica that cannot reconcile yet. Both
servers are plain aiohttp apps with typed state (``web.AppKey``); an empty or ``0`` address
disables one, as in controller-runtime.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from dap import listening
from dap.operator.metrics import Metrics

READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)


def parse_bind(address: str) -> tuple[str, int] | None:
    """``":8081"`` → ``("0.0.0.0", 8081)``; ``"127.0.0.1:0"`` → any free port; ``""``/``"0"`` → off."""
    address = address.strip()
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like [host]:port, got {address!r}")
    return (host.strip("[]") or "0.0.0.0", int(port))


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[READY]():
        return web.Response(text="ok\n")
    return web.Response(status=503, text="not ready\n")


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def probe_app(ready: Callable[[], bool]) -> web.Application:
    app = web.Application()
    app[READY] = ready
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


def metrics_app(metrics: Metrics) -> web.Application:
    app = web.Application()
    app[METRICS] = metrics
    app.router.add_get("/metrics", _metrics)
    return app


async def serve(
    app: web.Application, address: str, what: str = "a listener"
) -> tuple[web.AppRunner, int] | None:
    """Start ``app`` on ``address``; returns the runner and the bound port, or None when off;
    ``listening.ListenError`` naming ``what`` when the address cannot be taken."""
    bind = parse_bind(address)
    if bind is None:
        return None
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, bind[0], bind[1])
    try:
        await listening.start(site, what, listening.address(*bind))
    except listening.ListenError:
        await runner.cleanup()
        raise
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    port = sockets[0].getsockname()[1] if sockets else bind[1]
    return runner, int(port)
