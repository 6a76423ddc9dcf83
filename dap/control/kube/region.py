"""The region control on the management cluster: Workspaces and Clusters in, routing and status out.

kopf watches two kinds (every replica, ``standalone``: mirroring is idempotent):

- Workspace (not the ones a cluster control materialised, label ``dap.io/placed-by``): its spec
  becomes its binding in the deployments table, keyed by its name (the workspace id that
  registrations name too); a deleted Workspace's binding is dropped. A Workspace whose name is no
  workspace id, or is the name of a Workspace in another namespace, gets no binding: its
  ``Scheduled`` condition says why (reason ``Refused``), and it is retried on every pass.
- Cluster (cluster-scoped): labels and spec become its row of the cluster registry.

Both nudge the *pass*, which only the Lease holder runs (``--leader-elect``), at the latest every
``interval`` seconds: route every binding by rule 5 (``bindings.route``; a workspace moves only
when its cluster stopped being a candidate), then write each management Workspace's
``status.cluster``, ``Scheduled`` condition and the phase and conditions its cluster reported,
and each Cluster's ``status.workspaces``, ``lastPull`` and ``Connected`` condition (its
cluster control pulling, never pulled, or stopped for ``stale_after``). Writes are skipped when the status
already says so. The region never calls a cluster: clusters pull (``serving.placements``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from dap import kube
from dap.config import names
from dap.control.kube import bindings, leases, placing
from dap.control.storage import store

log = logging.getLogger(__name__)
G, V = names.CRD_GROUP, names.CRD_VERSION
LEASE_NAME = "dap-region-control"
STAMP = "%Y-%m-%dT%H:%M:%SZ"


@dataclasses.dataclass(frozen=True)
class Options:
    dsn: str
    namespace: str = ""  # management Workspaces watched here; empty: every namespace
    interval: float = 5.0
    stale_after: float = 60.0  # a Cluster is no longer Connected this long after its last pull
    leader_elect: bool = False
    lease_namespace: str = "dap-system"
    lease_name: str = LEASE_NAME
    lease_seconds: float = 15.0  # a follower takes over this long after the leader's last renewal
    kubeconfig: str = ""  # this kubeconfig instead of the in-cluster account or $KUBECONFIG
    server: str = ""  # test hook: API server URL without credentials


Key = tuple[str, str]  # a management Workspace's (namespace, name)


class Region:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.pool: store.Pool | None = None
        self.client: kube.Client | None = None
        self.elector: leases.Elector | None = None
        self.workspaces: dict[Key, dict[str, Any]] = {}  # status last seen or written
        self.refused: dict[Key, tuple[dict[str, Any], str]] = {}  # spec, why it has no binding
        self.clusters: dict[str, dict[str, Any]] = {}  # name -> status last seen or written
        self.nudged = asyncio.Event()
        self.passes = 0
        self._task: asyncio.Task[None] | None = None

    # -- kopf side ----------------------------------------------------------------------------

    async def connect(self, info: kopf.ConnectionInfo) -> None:
        old, client = self.client, kube.Client.connect(info)
        self.client = client
        if old is not None:
            await old.close()
        if self.options.leader_elect:
            duration = max(self.options.lease_seconds, 3 * self.options.interval)
            self.elector = leases.Elector(
                client, self.options.lease_namespace, self.options.lease_name, duration
            )

    async def start(self) -> None:
        if self._task is None:
            self.pool = await store.connect(self.options.dsn, max_size=4)
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.elector is not None:
            with contextlib.suppress(Exception):
                await self.elector.release()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.client is not None:
            await self.client.close()
            self.client = None

    async def on_workspace(self, event: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        pool = await self._pool()
        if event == "DELETED":
            await bindings.forget_workspace(pool, *key)
            self.workspaces.pop(key, None)
            self.refused.pop(key, None)
        else:
            spec = dict(body.get("spec") or {})
            await self._record(pool, key, spec)
            self.workspaces[key] = dict(body.get("status") or {})
        self.nudged.set()

    async def _record(self, pool: store.Pool, key: Key, spec: dict[str, Any]) -> None:
        why = await bindings.record_workspace(pool, *key, spec)
        if why is None:
            self.refused.pop(key, None)
        else:
            self.refused[key] = (spec, why)

    async def on_cluster(self, event: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        name = str(meta.get("name", ""))
        pool = await self._pool()
        if event == "DELETED":
            await bindings.forget_cluster(pool, name)
            self.clusters.pop(name, None)
        else:
            async with pool.acquire() as conn:
                await bindings.record_cluster(conn, name, meta.get("labels") or {}, body.get("spec") or {})
            self.clusters[name] = dict(body.get("status") or {})
        self.nudged.set()

    async def _pool(self) -> store.Pool:
        await self.start()
        assert self.pool is not None
        return self.pool

    # -- the pass -----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.interval):  # not wait_for: 3.11 loses a stop there
                    await self.nudged.wait()
            self.nudged.clear()
            if self.elector is not None and not await self.elector.try_acquire():
                continue
            try:
                await self.pass_once()
            except (kube.ApiError, kube.ApiUnavailableError, OSError) as exc:
                log.warning("region pass failed, retrying: %s", exc)
            except Exception:  # the loop must outlive any one pass
                log.exception("region pass failed")

    async def pass_once(self) -> None:
        pool, client = await self._pool(), self.client
        if client is None:
            return
        for key, (spec, _) in list(self.refused.items()):  # the holder of its name may be gone
            await self._record(pool, key, spec)
        await bindings.route(pool)
        moment = datetime.now(UTC)
        now = moment.strftime(STAMP)
        await self._write_workspace_statuses(client, pool, now)
        for name, (state, count, pulled) in (await bindings.cluster_views(pool)).items():
            if name not in self.clusters:
                continue
            before = list(self.clusters[name].get("conditions") or [])
            wanted = {
                "phase": state.capitalize(),
                "workspaces": count,
                "lastPull": pulled.strftime(STAMP) if pulled else None,
                "conditions": [placing.connection(name, pulled, moment, self.options.stale_after, before)],
            }
            previous = self.clusters[name]
            if all(previous.get(k) == v for k, v in wanted.items()):
                continue
            with contextlib.suppress(kube.NotFoundError):
                await client.patch(kube.CLUSTERS, "", name, {"status": wanted}, subresource="status")
                self.clusters[name] = {**previous, **wanted}
        self.passes += 1

    async def _write_workspace_statuses(self, client: kube.Client, pool: store.Pool, now: str) -> None:
        statuses: dict[Key, dict[str, Any]] = {}
        for binding in await bindings.bindings(pool):
            key = (binding.namespace, binding.workspace)
            if key in self.workspaces:  # else not (yet) seen by this replica's watch
                statuses[key] = placing.management_status(binding, self.workspaces[key], now)
        for key, (_, why) in self.refused.items():
            if key in self.workspaces:
                statuses[key] = placing.refused_status(why, self.workspaces[key], now)
        for key, desired in sorted(statuses.items()):
            previous = self.workspaces[key]
            if placing.same_status(desired, previous):
                continue
            try:
                await client.patch(kube.WORKSPACES, *key, {"status": desired}, subresource="status")
            except kube.NotFoundError:
                continue  # deleted meanwhile; its DELETED event drops the binding
            except kube.ApiError as exc:  # one refused status must not hold up the others
                log.warning("status of %s/%s not written: %s", *key, exc)
                continue
            self.workspaces[key] = {**previous, **desired}


def register(registry: kopf.OperatorRegistry, region: Region) -> None:
    @kopf.on.login(id="login", registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        info = kube.login(region.options.server, region.options.kubeconfig)
        await region.connect(info)
        return info

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.standalone = True  # the pass is elected by Lease; mirroring is idempotent
        settings.posting.level = logging.WARNING
        settings.watching.connect_timeout = 10
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
        await region.start()

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(**_: Any) -> None:
        await region.stop()

    @kopf.on.event(G, V, "workspaces", labels={placing.LABEL_PLACED_BY: kopf.ABSENT}, registry=registry)
    async def workspace_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await region.on_workspace(type, body)

    @kopf.on.event(G, V, "clusters", registry=registry)
    async def cluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        await region.on_cluster(type, body)


async def run(
    options: Options,
    *,
    stop_flag: asyncio.Event | threading.Event | None = None,
    region: Region | None = None,
) -> Region:
    """Run one region control until ``stop_flag`` is set (or cancelled)."""
    region = region or Region(options)
    registry = kopf.OperatorRegistry()
    register(registry, region)
    try:
        await kopf.operator(
            registry=registry,
            stop_flag=stop_flag,
            standalone=True,
            clusterwide=not options.namespace,
            namespaces=[options.namespace] if options.namespace else [],
        )
    finally:
        await region.stop()
    return region
