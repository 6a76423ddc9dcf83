"""One operator instance: its options, its parts, and the coroutine that runs it under kopf.

``Runtime`` owns everything with a lifetime: the Kubernetes client (made when kopf logs in), the
caches, the reconciler and nudger, the reporter, the trusted-key refresher, and the probe and
metrics servers. ``run`` builds a fresh kopf registry for it and awaits ``kopf.operator``; the
CLI calls it with the options of ``dap operator``, tests and the benchmark call it in a task
with ``Options.server`` pointing at kmock's emulator and a ``stop_flag`` to end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

import aiohttp
import kopf
from aiohttp import web

from dap import kube, listening
from dap.operator import caches, errors, handlers, podhealth, probes, reconciling, reporting, trusting
from dap.operator.metrics import Metrics
from dap.operator.options import PEERING_NAME, SAME_IMAGE, Options, own_image

logger = logging.getLogger(__name__)


class Runtime:
    """Everything with a lifetime in one operator instance (satisfies ``handlers.Parts``)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.metrics = Metrics()
        self.caches = caches.Caches()
        self.trust = reconciling.Trust()
        self.reporter = reporting.Reporter(
            control_url=options.control_cluster_url,
            cluster=options.cluster_name,
            node=options.node_name,
            metrics=self.metrics,
            interval=options.report_interval,
        )
        self._client: kube.Client | None = None
        self.pod_health = podhealth.Watcher(options.namespace)
        self._peering_made = False
        self.reconciler = reconciling.Reconciler(
            client=_Unconnected(),  # replaced at login
            caches=self.caches,
            metrics=self.metrics,
            reporter=self.reporter,
            resource_image=options.resource_image,
            control_cluster_url=options.control_cluster_url,
            trust=self.trust,
            workspace_concurrency=options.workspace_concurrency,
            skip_signature=options.insecure_skip_signature_verify,
            dev_auto_grant=options.dev_auto_grant_claims,
            pod_env_secret=options.pod_env_secret,
            pod_health=self.pod_health,
        )
        self.nudger = reconciling.Nudger(self.metrics)
        self.started = False
        self.kopf_settings: kopf.OperatorSettings | None = None
        self.probe_port: int | None = None
        self.metrics_port: int | None = None
        self._runners: list[web.AppRunner] = []
        self._tasks: list[asyncio.Task[None]] = []

    def ready(self) -> bool:
        return self.started and self._client is not None and self.caches.attached

    async def connect(self, info: kopf.ConnectionInfo) -> None:
        old = self._client
        self._client = kube.Client.connect(info, observer=self.metrics.observe_request)
        self.reconciler.client = self._client
        if old is not None:
            await old.close()
        await self._ensure_peering(self._client)
        if self.reconciler.resource_image == SAME_IMAGE:
            self.reconciler.resource_image = await self._own_image(self._client)

    async def _own_image(self, client: kube.Client) -> str:
        """The image of this operator's own container: the resource pods run the same one."""
        namespace, name = os.environ.get("POD_NAMESPACE", ""), os.environ.get("POD_NAME", "")
        try:
            image = own_image(await client.get(kube.PODS, namespace, name))
        except kube.KubeError as exc:
            raise errors.OperatorError(
                f"cannot read this operator's pod {namespace}/{name} for the resource pods' image "
                f"({exc}); pass --resource-image, or allow get on pods"
            ) from exc
        if image is None:
            raise errors.OperatorError(
                f"cannot tell the resource pods' image: pod {namespace}/{name} has no container "
                "'operator' (nor a single container); pass --resource-image"
            )
        logger.info("resource pods run this operator's image %s", image)
        return image

    async def _ensure_peering(self, client: kube.Client) -> None:
        """Make kopf's peering object for ``--leader-elect`` unless it exists (once, at login).

        kopf elects through that object but never creates it, and its keep-alives to a missing
        one fail silently: every replica would then reconcile. Shipping it in the manifests
        does not work either: ``kubectl apply -k`` cannot create a custom object in the same run
        as its CRD ("ensure CRDs are installed first"), which the real API server showed.
        """
        if not self.options.leader_elect or self._peering_made:
            return
        namespace = self.options.namespace
        kind = "KopfPeering" if namespace else "ClusterKopfPeering"
        meta = {"name": PEERING_NAME, **({"namespace": namespace} if namespace else {})}
        resource = kube.PEERINGS if namespace else kube.CLUSTER_PEERINGS
        try:
            await client.create(
                resource, namespace, {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": meta}
            )
        except errors.ConflictError:
            pass  # made by another replica, or by an administrator
        else:
            logger.info("created the %s %r for leader election", kind, PEERING_NAME)
        self._peering_made = False

    def log_failure(self, controller: str, key: caches.ObjectKey, exc: Exception) -> None:
        self.metrics.reconcile_errors_total.labels(controller).inc()
        logger.warning("%s %s/%s: %s", controller, key[0], key[1], exc)

    async def start_background(self) -> None:
        """Probes, metrics, reports and key refresh: started once kopf runs the startup handler."""
        if self.started:
            return
        probe = await probes.serve(
            probes.probe_app(self.ready),
            self.options.health_probe_bind_address,
            "the probes, --health-probe-bind-address",
        )
        if probe is not None:
            self._runners.append(probe[0])
            self.probe_port = probe[1]
        served = await probes.serve(
            probes.metrics_app(self.metrics),
            self.options.metrics_bind_address,
            "metrics, --metrics-bind-address",
        )
        if served is not None:
            self._runners.append(served[0])
            self.metrics_port = served[1]
        if self.options.control_cluster_url:
            await self._refresh_keys_once()
            self._tasks.append(asyncio.create_task(self._refresh_keys()))
        self._tasks.append(asyncio.create_task(self.reporter.run()))
        if self.options.pod_health_interval > 0:
            self._tasks.append(asyncio.create_task(self._read_pod_health()))
        self.started = True

    async def stop_background(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.nudger.close()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _refresh_keys_once(self) -> bool:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            keys = await trusting.fetch_keys(session, self.options.control_cluster_url)
        if keys is None or keys == self.trust.keys:
            return False
        self.trust.keys = keys
        logger.info("trusting %d artifact signing key(s)", len(keys))
        return True

    async def _refresh_keys(self) -> None:
        """Every ``keys_refresh_interval``; sooner (1, 2, 4 … s) while no key is known yet. The
        control plane often starts after the operator (one ``kubectl apply`` creates both), and
        until the operator hands pods a key they cannot verify an artifact, so cannot serve: a
        fresh cluster must not wait a whole interval for its first keys."""
        interval = self.options.keys_refresh_interval
        retry = 1.0
        while True:
            if self.trust.keys:
                await asyncio.sleep(interval)
            else:
                await asyncio.sleep(min(retry, interval))
                retry = min(retry * 2, interval)
            if await self._refresh_keys_once():
                for key in self.caches.workspace_keys():
                    self.nudger.nudge("workspace", key, self.reconciler.workspace)

    async def _read_pod_health(self) -> None:
        """Every ``pod_health_interval``: the pods' artifact problems (``podhealth``); the
        workspaces whose judgement changed are reconciled."""
        async with aiohttp.ClientSession() as session:
            while True:
                await asyncio.sleep(self.options.pod_health_interval)
                if self._client is None:
                    continue
                for key in await self.pod_health.sweep(self._client, session):
                    self.nudger.nudge("workspace", key, self.reconciler.workspace)


class _Unconnected(kube.Client):
    """Placeholder until kopf logs in; any call is a clear error, not an AttributeError."""

    def __init__(self) -> None:
        pass

    async def _call(self, verb: str, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        raise errors.ApiUnavailableError("the operator has not logged in to the API server yet")

    async def close(self) -> None:
        return None


def kopf_scope(options: Options) -> dict[str, Any]:
    """kopf's scope arguments: all namespaces, or just ``--namespace``; peering or standalone."""
    return {
        "clusterwide": not options.namespace,
        "namespaces": [options.namespace] if options.namespace else [],
        "standalone": not options.leader_elect,
    }


def _listen_error(exc: BaseException) -> listening.ListenError | None:
    """The listener's failure behind what kopf raised when the start-up handler gave up (its
    activity error is caused by the handler's ``PermanentError``, caused by this)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, listening.ListenError):
            return seen
        seen = seen.__cause__
    return None


async def run(
    options: Options,
    *,
    stop_flag: asyncio.Event | None = None,
    runtime: Runtime | None = None,
) -> Runtime:
    """Run one operator until ``stop_flag`` is set (or forever); returns its runtime."""
    runtime = runtime or Runtime(options)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, runtime)
    try:
        await kopf.operator(registry=registry, stop_flag=stop_flag, **kopf_scope(options))
    except Exception as exc:
        failed = _listen_error(exc)
        if failed is None:
            raise
        raise failed from exc  # one line for the command: which address, which option
    finally:
        await runtime.stop_background()
    return runtime
