"""The aiohttp application of ``dap control serve`` and its life cycle.

Routes per mode (spec, Endpoints: Control plane):

| route                          | region | cluster | standalone |
|--------------------------------|--------|---------|------------|
| POST /v1/artifacts             | yes    |         | yes        |
| GET  /v1/artifacts/{id}        | yes    | yes     | yes        |
| GET  /v1/keys, /v1/snapshot    | yes    | yes     | yes        |
| POST/GET /v1/evidence          | yes    | yes     | yes        |
| POST /v1/node-health, /v1/workspace-status, GET /v1/workspace-status | yes | yes | yes |
| PUT  /v1/clusters/{id}, GET /v1/clusters | yes |  |            |
| GET  /v1/placements?cluster=   | yes    |         | yes        |
| POST /v1/poll                  |        |         | dev only   |
| GET  /v1/log/head, entries, proof, consistency | yes | relayed | yes |
| GET  /health                   | yes    | yes     | yes        |

Start-up loads the desired state into memory and LISTENs on ``dap_control_changed`` so changes
made by other processes (``dap control revoke``, another replica) reach the in-memory snapshot;
region and standalone also end freezes past their end time (``freezing.expire``); cluster
mode restores its cached region snapshot and starts the sync and relay agent.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from dap import listening
from dap.control import errors
from dap.control.clusters import caches, live
from dap.control.ids import KeyId
from dap.control.serving import handlers, http, proofs, reports, settings, syncing, traced
from dap.control.serving import placements as placements_api
from dap.control.storage import schema, store
from dap.control.supply import contents, freezing, transparency
from dap.control.trust import signing, snapshots

log = logging.getLogger(__name__)

LISTENER: web.AppKey[asyncpg.pool.PoolConnectionProxy[asyncpg.Record]] = web.AppKey("listener")
ON_CHANGE: web.AppKey[Callable[..., None]] = web.AppKey("on_change")
RELOADS: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("reloads")
FREEZE_TASK: web.AppKey[asyncio.Task[None]] = web.AppKey("freeze_task")
SESSION = web.AppKey("session", aiohttp.ClientSession)
CLUSTER_AGENT = web.AppKey("cluster_agent", syncing.Agent)


def build_app(
    *, config: settings.Settings, pool: Any, signer: signing.Signer | None = None
) -> web.Application:
    if config.mode != "cluster" and signer is None:
        raise errors.SigningKeyError(f"{config.mode} mode signs artifacts and needs a signing key")
    app = web.Application(
        middlewares=[*traced.middlewares(), http.problems, http.parameters],
        client_max_size=config.max_body_bytes,
    )
    app[http.POOL] = pool
    app[http.SETTINGS] = config
    initial = snapshots.State(
        version=0,
        issued_at=datetime.now(UTC).replace(microsecond=0),
        ttl=config.snapshot_ttl,
        environment=config.environment,
    )
    app[http.LIVE] = live.Live(initial, signer)
    app[http.TRUSTED] = {signing.key_id(k): k for k in config.trusted_keys}
    if signer is not None:
        app[http.SIGNER] = signer

    routes = [
        web.get("/health", handlers.get_health),
        web.get("/v1/keys", handlers.get_keys),
        web.get("/v1/snapshot", handlers.get_snapshot),
        web.get("/v1/artifacts/{artifact_id}", handlers.get_artifact),
        web.post("/v1/evidence", reports.post_evidence),
        web.get("/v1/evidence", reports.get_evidence),
        web.post("/v1/node-health", reports.post_node_health),
        web.post("/v1/workspace-status", reports.post_workspace_status),
        web.get("/v1/workspace-status", reports.get_workspace_status),
    ]
    if config.accepts_artifacts:
        routes.append(web.post("/v1/artifacts", handlers.post_artifact))
        routes.append(web.get("/v1/placements", placements_api.get_placements))
    if config.mode == "cluster":
        routes += [web.get(f"/v1/log/{name}", proofs.relay) for name in proofs.ROUTES]
    else:
        routes += [
            web.get("/v1/log/head", proofs.get_head),
            web.get("/v1/log/entries", proofs.get_entries),
            web.get("/v1/log/proof", proofs.get_proof),
            web.get("/v1/log/consistency", proofs.get_consistency),
        ]
    if config.mode == "region":
        routes += [
            web.put("/v1/clusters/{cluster_id}", reports.put_cluster),
            web.get("/v1/clusters", reports.get_clusters),
        ]
    if config.polls:
        routes.append(web.post("/v1/poll", handlers.post_poll))
    app.add_routes(routes)
    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
    return app


async def _start(app: web.Application) -> None:
    config = app[http.SETTINGS]
    pool = app[http.POOL]
    if config.mode == "cluster":
        if not app[http.TRUSTED]:
            app[http.TRUSTED].update(await caches.trusted_keys(pool))
        else:
            await caches.add_trusted_keys(pool, app[http.TRUSTED])
        saved = await caches.region_snapshot(pool)
        if saved is not None:
            etag, body = saved
            version = caches.snapshot_version(body)
            app[http.LIVE].set_region(live.RegionSnapshot(etag=etag, body=body, version=version))
        session = aiohttp.ClientSession()
        app[SESSION] = session
        app[proofs.SESSION] = session
        trusted: dict[KeyId, bytes] = app[http.TRUSTED]
        agent = syncing.Agent(
            pool=pool, config=config, state=app[http.LIVE], trusted=trusted, session=session
        )
        app[CLUSTER_AGENT] = agent
        app[http.AGENT] = agent
        agent.start()
        return
    listener = await pool.acquire()
    app[LISTENER] = listener

    app[RELOADS] = set()

    def changed(*_: object) -> None:
        task = asyncio.get_running_loop().create_task(http.reload_state(app))
        app[RELOADS].add(task)  # held so that the task is not garbage-collected mid-flight
        task.add_done_callback(app[RELOADS].discard)

    app[ON_CHANGE] = changed
    # Listen first, then load: a change committed in between is seen by one or the other.
    await listener.add_listener(schema.NOTIFY_CHANNEL, changed)
    # The log records this control's key and any artifact registered before the log existed.
    await transparency.record_key(pool, app[http.SIGNER])
    await transparency.backfill(pool, app[http.SIGNER])
    await http.reload_state(app)
    app[FREEZE_TASK] = asyncio.get_running_loop().create_task(_end_freezes(app))


async def _end_freezes(app: web.Application) -> None:
    """End freezes past their end time and promote what soaked long enough in staging.

    Time passing alone changes the desired state in both cases; the snapshot bump reaches every
    process by NOTIFY.
    """
    config = app[http.SETTINGS]
    while True:
        await asyncio.sleep(config.freeze_check_interval)
        try:
            if not await freezing.expire(app[http.POOL]):
                version, deployments = await contents.snapshot_content(
                    app[http.POOL], environment=config.environment
                )
                current = app[http.LIVE].state
                if version == current.version and tuple(deployments) != current.deployments:
                    async with app[http.POOL].acquire() as conn, conn.transaction():
                        await store.bump_snapshot(conn)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            log.warning("cannot check freezes and promotions: %r", exc)


async def _stop(app: web.Application) -> None:
    if FREEZE_TASK in app:
        app[FREEZE_TASK].cancel()
        await asyncio.gather(app[FREEZE_TASK], return_exceptions=True)
    if CLUSTER_AGENT in app:
        await app[CLUSTER_AGENT].stop()
    if SESSION in app:
        await app[SESSION].close()
    if LISTENER in app:
        try:
            await app[LISTENER].remove_listener(schema.NOTIFY_CHANNEL, app[ON_CHANGE])
            await app[http.POOL].release(app[LISTENER])
        except (asyncpg.InterfaceError, asyncpg.PostgresError, OSError):
            log.warning("the listening connection was already gone at shutdown")
        await asyncio.gather(*app[RELOADS], return_exceptions=True)


async def serve(app: web.Application, *, host: str, port: int, ready: asyncio.Event | None = None) -> None:
    """Run until SIGINT/SIGTERM (or cancellation), then shut down cleanly."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await listening.start(site, "the control API, --host/--port", listening.address(host, port))
    except BaseException:
        await runner.cleanup()  # the start-up's tasks and the listening connection end with it
        raise
    config = app[http.SETTINGS]
    log.info(
        "control serving", extra={"ctx": {"mode": config.mode, "dev": config.dev, "host": host, "port": port}}
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
