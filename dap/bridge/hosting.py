"""The bridge hosted in a server process: ``attach(app, opts)`` before the server starts.

What it adds to the server's application:

- ``app[sidecars.INVOKER]``: the invoke client (``invoking.Client``), so sidecar actions reach the
  app process at ``--sidecar-endpoint`` instead of answering 501;
- the ``/ctx`` listener (``ctx``), opened at start on ``--ctx-listen`` (loopback TCP, port 0 by
  default, or ``unix:///path``) and sent to the app on every invoke in ``X-Svc-Ctx-Url``. It must
  run in this process: a scope's calls run on the very connection of the action's transaction;
- the datastores of the served catalog (``datastores.Registry``), eager ones connected at start,
  followed when the catalog is swapped (a resource pod boots empty and swaps each artifact in);
- the health watch of the app (``health``), reported by the admin ``/health``.

The server never imports this package; the process entry point (``dap serve`` through
``dap.bridge.cli``) calls :func:`attach`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from dap import listening
from dap.bridge import ctx, datastores, health, invoking, runtimes, scopes, wire
from dap.server import errors, options, state
from dap.server.workflows import sidecars

log = logging.getLogger(__name__)
BRIDGE: web.AppKey[Bridge] = web.AppKey("bridge")
DEGRADED = "SVC.SIDECAR.DEGRADED"
FOLLOW = 1.0  # seconds between two looks at the served catalog's datastores


@dataclass
class Bridge:
    """One process's bridge: invoker, /ctx listener, datastores and health."""

    endpoint: wire.Endpoint
    timeout: float
    ctx_listen: str
    registry: datastores.Registry
    ping_interval: float = health.INTERVAL
    scopes: scopes.Scopes = field(default_factory=scopes.Scopes)
    health: health.Health = field(default_factory=health.Health)
    ctx_url: str = ""
    child: runtimes.Child | None = None  # child-process mode

    def __post_init__(self) -> None:
        self.client = invoking.Client(
            self.endpoint, timeout=self.timeout, scopes_=self.scopes, ctx_url=lambda: self.ctx_url
        )
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None
        self._follow: asyncio.Task[None] | None = None

    async def invoke(self, call: sidecars.Invocation) -> sidecars.Reply:
        if self.health.degraded:
            raise errors.ServiceUnavailable(
                f"the app process at {self.endpoint.shown} failed {self.health.failures} health checks "
                f"in a row ({self.health.last_error}); actions it implements are refused until it "
                "answers again",
                retry_after=int(self.ping_interval),
                code=DEGRADED,
            )
        return await self.client.invoke(call)

    async def ping(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(self.ping_interval / 2, 0.1))
        async with self.client.session.get(self.endpoint.base + "/health", timeout=timeout) as resp:
            if resp.status >= 500:
                raise RuntimeError(f"GET /health answered {resp.status}")

    async def start(self, server: web.Application) -> None:
        context = ctx.Context(server, self.scopes, self.registry, {})
        self._runner = web.AppRunner(ctx.build(context, self.health.report), access_log=None)
        await self._runner.setup()
        what = "the bridge's /ctx listener, --ctx-listen"
        if self.ctx_listen.startswith("unix:"):
            path = self.ctx_listen[len("unix:") :].lstrip("/")
            await listening.start(web.UnixSite(self._runner, "/" + path), what, f"unix:///{path}")
            self.ctx_url = f"unix:///{path}"
        else:
            address = options.parse_address(self.ctx_listen)
            site = web.TCPSite(self._runner, address.host, address.port)
            await listening.start(site, what, listening.address(address.host, address.port))
        if not self.ctx_url:
            host, port = self._runner.addresses[0][:2]
            self.ctx_url = f"http://{host}:{port}"
        await self.registry.connect_eager()
        if self.child is not None:
            await self.child.start()
        self._watch = asyncio.create_task(health.watch(self.health, self.ping, interval=self.ping_interval))
        self._follow = asyncio.create_task(self.follow(server))
        log.info("bridge: app at %s, /ctx at %s", self.endpoint.shown, self.ctx_url)

    async def follow(self, server: web.Application) -> None:
        """Keep the datastores on the served catalog's (the /ctx calls check it too): a swapped
        spec's eager stores connect within :data:`FOLLOW` seconds, dropped ones close."""
        while True:
            try:
                await self.registry.follow(server[state.SPEC].current.datastores)
            except Exception as exc:  # a backend that would not close: the next look tries again
                log.warning("bridge: following the datastores failed: %s", exc)
            await asyncio.sleep(FOLLOW)

    async def stop(self) -> None:
        await health.stop(self._watch)
        await health.stop(self._follow)
        self._watch = self._follow = None
        if self.child is not None:
            await self.child.stop()
        await self.client.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.registry.close()


def attach(
    app: web.Application,
    opts: options.ServeOptions,
    *,
    state_dir: Path | None = None,
    ping_interval: float = health.INTERVAL,
) -> Bridge | None:
    """Host the bridge in ``app`` when ``opts`` names a sidecar endpoint; None otherwise."""
    if opts.sidecar_endpoint is None and opts.runtime is None:
        return None
    base = Path(os.environ.get("DAP_STATE_DIR", ".dap"))
    child: runtimes.Child | None = None
    ctx_listen = opts.ctx_listen
    sidecar = opts.sidecar_endpoint
    if opts.runtime is not None:  # child-process mode: both sockets are ours
        sockets = (state_dir or base).resolve()
        sockets.mkdir(parents=True, exist_ok=True)
        sidecar = sidecar or f"unix://{sockets / 'app.sock'}"
        if not ctx_listen.startswith("unix:"):
            ctx_listen = f"unix://{sockets / 'ctx.sock'}"
        app_dir = (opts.app_dir or base / "app").resolve()
        try:
            argv = runtimes.command(opts.runtime, app_dir, opts.app_entrypoint)
        except ValueError as exc:
            raise errors.BootRefused(str(exc)) from exc
        child = runtimes.Child(
            argv,
            app_socket=Path(wire.parse_endpoint(sidecar).socket or ""),
            ctx_socket=Path("/" + ctx_listen[len("unix:") :].lstrip("/")),
            cwd=app_dir,
        )
    assert sidecar is not None
    try:
        endpoint = wire.parse_endpoint(sidecar)
    except ValueError as exc:
        raise errors.BootRefused(f"--sidecar-endpoint: {exc}") from exc
    registry = datastores.Registry(
        app[state.SPEC].current.datastores,  # followed on every swap (``Bridge.follow``)
        (state_dir or base) / "datastores",
        environment=os.environ.get("DAP_ENVIRONMENT", ""),
    )
    bridge = Bridge(
        endpoint,
        opts.invoke_timeout,
        ctx_listen,  # loopback or unix: options.check refused anything else
        registry,
        ping_interval=ping_interval,
        child=child,
    )
    app[BRIDGE] = bridge
    app[sidecars.INVOKER] = bridge

    async def on_startup(server: web.Application) -> None:
        await bridge.start(server)

    async def on_cleanup(_server: web.Application) -> None:
        await bridge.stop()

    async def check() -> str | None:
        report = bridge.health.report()
        return "; ".join(report["reasons"]) if bridge.health.degraded else None

    app.on_startup.append(on_startup)
    app.on_cleanup.insert(0, on_cleanup)  # before the pool closes
    app[state.HEALTH_CHECKS].append(check)
    return bridge
