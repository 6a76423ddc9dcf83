"""Boot and shutdown of a resource pod: the server for its workspace, the loops, ``/health``.

Boot order:

1. the production server is created (``dap.server.create_server``) with an empty catalog — pool
   opened, platform tables ensured, ``default`` seeded — and the pod's workspace is registered
   in that database if it is missing;
2. trusted keys: ``--trusted-keys``; with ``--dev`` also those remembered in the state directory
   and those the control plane publishes (best effort: it may be down);
3. the last verified artifact in the state directory is verified again and loaded, so a pod
   restarted while the control plane is unreachable serves its last good version at once;
4. what ``dap serve`` hosts beside the server is hosted the same way (its ``ATTACH`` hooks): the
   gRPC listener with ``--grpc-addr``, whose services follow the catalog each swap brings (a
   newly registered entity is served and reflected without a restart), and the app-process bridge
   with ``--sidecar-endpoint`` (``DAP_SIDECAR_ENDPOINT``) or ``--runtime``
   (``dap.bridge.hosting.attach``), here with its state (embedded datastores, child-mode sockets)
   under ``<state-dir>/bridge``; it follows the catalog each swap brings (its datastores). File
   fields keep their bytes under ``<state-dir>/files`` (the pod's root filesystem is read-only
   under the operator);
5. ``GET /health`` and ``GET /ready`` are added to the main application and both listeners start;
6. the pull loop, the evidence sender, and the health (30 s) and metering (5 min) reports run
   as tasks until :meth:`Running.stop`.

``/health`` lives on the main listener (the operator's probes hit the ``http`` port, 8080) and
answers ``{status, checks, reasons, checked_at, workspace, phase, artifact_id, version,
convergence}``; 503 only when Postgres is unreachable, since a pod that still serves its old
version while control is down is degraded, not dead. The admin listener's ``/health`` is the
server's own: ``dap.server`` gives no hook to extend it (see docs/decisions/pod.md).

``/ready`` is the readiness probe's path (the operator's Deployment): 200 only once an artifact is
loaded and served and Postgres answers, 503 before (and after :meth:`Running.stop` began), so a
Service never sends a request to a pod that would answer "unknown workspace". ``/health`` stays
the liveness path: a pod waiting for its first artifact is alive, only not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from dap import server
from dap.bridge import hosting as bridging
from dap.resource_pod import (
    converging,
    errors,
    loading,
    persisting,
    pulling,
    pullmetrics,
    reporting,
    settings,
    timing,
)
from dap.server import cli as server_cli
from dap.server import options
from dap.server.storage import files
from dap.server.web import app as web_app

log = logging.getLogger(__name__)

FLUSH_ON_STOP = 2.0  # seconds the last evidence gets on shutdown
POD = web.AppKey("pod", pulling.Pod)


async def health(request: web.Request) -> web.Response:
    pod = request.app[POD]
    status, checks = await pod.health()
    convergence = pod.status.as_json()
    reasons = [
        f"{name}: {value}" for name, value in checks.items() if value not in ("ok",) and name != "phase"
    ]
    if pod.status.phase in (converging.Phase.FAILED, converging.Phase.ROLLED_BACK):
        # the phase alone makes the pod degraded; the reason is what the last attempt said
        reasons.append(f"convergence: {pod.status.phase}: {pod.status.message}")
    body = {
        "status": "ok" if status == "healthy" else status,
        "checks": checks,
        "reasons": reasons,
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "workspace": pod.config.workspace,
        "phase": convergence["phase"],
        "artifact_id": convergence["artifact_id"],
        "version": convergence["version"],
        "convergence": convergence,
    }
    return web.json_response(body, status=503 if status == "unhealthy" else 200)


READY_PATH = "/ready"
STOPPING = web.AppKey("stopping", asyncio.Event)


def readiness(pod: pulling.Pod, postgres: str | None, stopping: bool) -> list[str]:
    """Why the pod may not take traffic yet (empty: it may): pure, for ``/ready``."""
    reasons: list[str] = []
    if stopping:
        reasons.append("stopping")
    if pod.status.running is None:
        reasons.append(f"no artifact served yet (phase {pod.status.phase or 'none'})")
    if postgres:
        reasons.append(f"postgres: {postgres}")
    return reasons


async def ready(request: web.Request) -> web.Response:
    pod = request.app[POD]
    postgres = await reporting.check_postgres(request.app[server.state.POOL])
    reasons = readiness(pod, postgres, request.app[STOPPING].is_set())
    body = {
        "ready": not reasons,
        "reasons": reasons,
        "workspace": pod.config.workspace,
        "version": pod.status.running.version if pod.status.running else None,
    }
    return web.json_response(body, status=503 if reasons else 200)


def attach(app: web.Application, opts: options.ServeOptions, config: settings.Settings) -> None:
    """Host beside the pod's server what ``dap serve`` hosts beside its own: every hook of
    ``dap.server.cli.ATTACH`` (gRPC with ``--grpc-addr``; the bridge when ``dap.bridge.cli`` put
    it there), the bridge always, with its state in the pod's state directory."""
    bridging.attach(app, opts, state_dir=config.state_dir / "bridge")
    for hook in server_cli.ATTACH:
        if hook is not bridging.attach:  # hosted above, where the pod keeps its state
            hook(app, opts)


@dataclass
class Running:
    """One started pod; ``stop`` ends it cleanly (idempotent)."""

    server: server.Server
    pod: pulling.Pod
    session: aiohttp.ClientSession
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stopped: bool = False

    @property
    def api_url(self) -> str:
        return self.server.urls["api"]

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.server.app[STOPPING].set()
        await timing.cancel_all(self.tasks)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_ON_STOP):
                await self.pod.sender.flush()
        if len(self.pod.sender.buffer):
            log.warning(
                "evidence left unsent at shutdown", extra={"ctx": {"records": len(self.pod.sender.buffer)}}
            )
        await self.server.stop()
        await self.session.close()
        log.info("pod stopped", extra={"ctx": {"workspace": self.pod.config.workspace}})


async def start(
    opts: options.ServeOptions,
    config: settings.Settings,
    *,
    self_check: loading.SelfCheck | None = None,
    shutdown_timeout: float | None = None,
) -> Running:
    """Boot a pod as described above; raise ``BootRefused`` (server) or ``PodError``."""
    session = aiohttp.ClientSession()
    srv: server.Server | None = None
    try:
        srv = await server.create_server(opts, loading.empty_catalog())
        if shutdown_timeout is not None:
            srv.shutdown_timeout = shutdown_timeout
        await loading.ensure_workspace(srv.app, config.workspace)
        trusted = dict(config.trusted_keys)
        if config.fetch_keys:
            try:
                remembered = await asyncio.to_thread(
                    persisting.StateDir(config.state_dir, config.workspace).load_keys
                )
            except errors.StateDirError as exc:
                log.warning("remembered keys unreadable", extra={"ctx": {"error": str(exc)}})
                remembered = {}
            trusted.update(remembered)
        running_server = srv
        pod = pulling.Pod(
            config=config,
            app=srv.app,
            session=session,
            trusted=trusted,
            api_url=lambda: running_server.urls.get("api"),
            self_check=self_check,
        )
        await pod.refresh_keys()
        await pod.restore()
        srv.app[web_app.FILES] = files.FileStore(config.state_dir / "files")
        attach(srv.app, opts, config)
        srv.app[POD] = pod
        srv.app[server.state.METRICS].registry.register(
            pullmetrics.Collector(config.workspace, pod.stats, lambda: pod.status)
        )
        srv.app[STOPPING] = asyncio.Event()
        srv.app.router.add_get("/health", health)
        srv.app.router.add_get(READY_PATH, ready)
        await srv.start()
    except BaseException:
        if srv is not None:
            await srv.stop()
            if not srv.app.frozen:  # never started: the pool is closed by the app's cleanup only
                await srv.app[server.state.POOL].close()
        await session.close()
        raise
    running = Running(server=srv, pod=pod, session=session)
    running.tasks = [
        asyncio.create_task(pod.run(), name="pod-pull"),
        asyncio.create_task(pod.sender.run(), name="pod-evidence"),
        asyncio.create_task(pod.every(config.health_interval, pod.report_health), name="pod-health"),
        asyncio.create_task(pod.every(config.metering_interval, pod.report_metering), name="pod-metering"),
    ]
    log.info(
        "pod serving",
        extra={
            "ctx": {
                "workspace": config.workspace,
                "api": srv.urls.get("api"),
                "admin": srv.urls.get("admin"),
                "control": config.control_url,
                **pod.status.as_json(),
            }
        },
    )
    return running
