"""Reconcilers of Workspace, Datastore and ResourceClaim: read caches, compare, write differences.

Each reconciler is level-based: given only the key of an object, it reads the object and
everything it depends on from ``caches`` (memory, no API call), computes the desired state with
the pure functions of ``builders``, ``conditions`` and ``claims``, and writes only what differs
(``diffing``). Running one twice, or for an object nothing happened to, writes nothing. That is
what lets the thin kopf handlers call them from any trigger (the object's own change, its
ClusterClass, its Deployment's status, a claim, a Secret) without bookkeeping.

Concurrency: workspace reconciles take a slot of a semaphore sized by ``--workspace-concurrency``;
reconciles of one object are serialised by a per-key lock. ``Nudger`` runs the reconciles that
come from *other* objects' events: it coalesces repeated nudges of one key, and retries failures
with a capped exponential backoff (the kopf handlers of the object itself retry through
``kopf.TemporaryError`` instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, cast

from dap import kube, tracing
from dap.operator import bodies, builders, caches, claims, conditions, diffing, errors, metrics, podhealth
from dap.operator import reporting as reporting_

logger = logging.getLogger(__name__)

CHILDREN: tuple[tuple[str, kube.Resource], ...] = (
    ("ConfigMap", kube.CONFIGMAPS),
    ("Service", kube.SERVICES),
    ("Deployment", kube.DEPLOYMENTS),
    ("HorizontalPodAutoscaler", kube.AUTOSCALERS),
)


_TYPE_KEYS = ("apiVersion", "kind")  # list answers omit them; they are never patched


def now_iso() -> str:
    return reporting_.now_iso()


@dataclasses.dataclass
class Trust:
    """The public keys pods trust for artifacts; refreshed from the control plane."""

    keys: tuple[str, ...] = ()


class Reconciler:
    def __init__(
        self,
        *,
        client: kube.Client,
        caches: caches.Caches,
        metrics: metrics.Metrics,
        reporter: reporting_.Reporter,
        resource_image: str,
        control_cluster_url: str,
        trust: Trust,
        workspace_concurrency: int = 10,
        skip_signature: bool = False,
        dev_auto_grant: bool = False,
        pod_env_secret: str = "",
        pod_health: podhealth.Watcher | None = None,
    ) -> None:
        self.client = client
        self.caches = caches
        self.metrics = metrics
        self.reporter = reporter
        self.resource_image = resource_image
        self.control_cluster_url = control_cluster_url
        self.trust = trust
        self.skip_signature = skip_signature
        self.dev_auto_grant = dev_auto_grant
        # the dev-mode grants this process has announced (claim -> (reason, message)): said once
        self._auto_grants_said: dict[tuple[str, str], tuple[str, str]] = {}
        self.pod_env_secret = pod_env_secret
        self.pod_health = pod_health or podhealth.Watcher()
        self._slots = asyncio.Semaphore(workspace_concurrency)
        self._locks: dict[tuple[str, str, str], tuple[asyncio.Lock, int]] = {}
        self._statuses: dict[tuple[str, str, str], dict[str, Any]] = {}

    # -- plumbing ---------------------------------------------------------------------------

    def settings(self) -> builders.OperatorSettings:
        return builders.OperatorSettings(
            resource_image=self.resource_image,
            control_cluster_url=self.control_cluster_url,
            trusted_keys=self.trust.keys,
            pod_env_secret=self.pod_env_secret,
        )

    @contextlib.asynccontextmanager
    async def _run(self, controller: str, key: caches.ObjectKey) -> AsyncIterator[None]:
        token = (controller, *key)
        lock, users = self._locks.get(token, (asyncio.Lock(), 0))
        self._locks[token] = (lock, users + 1)
        started = time.perf_counter()
        try:
            async with lock:
                with tracing.span(f"reconcile {controller}", attributes={"dap.object": "/".join(key)}):
                    yield
        except Exception:
            self.metrics.reconcile_errors_total.labels(controller).inc()
            raise
        finally:
            self.metrics.reconcile_total.labels(controller).inc()
            self.metrics.reconcile_duration_seconds.labels(controller).observe(time.perf_counter() - started)
            lock, users = self._locks[token]
            if users <= 1:
                del self._locks[token]  # nobody else holds or awaits it
            else:
                self._locks[token] = (lock, users - 1)

    def seen(self, kind: str, key: caches.ObjectKey) -> None:
        """A watch event for this object arrived: drop what we remembered of our own writes."""
        self._statuses.pop((kind, *key), None)

    async def _write_status(
        self,
        kind: str,
        resource: kube.Resource,
        key: caches.ObjectKey,
        live: Mapping[str, Any],
        status: dict[str, Any],
    ) -> bool:
        """Patch ``status`` in when it differs from the live one (or from our last write)."""
        recent = self._statuses.get((kind, *key))
        if recent is not None and not diffing.patch_for(status, recent):
            return False
        patch = diffing.patch_for(status, live)
        if not patch:
            return False
        await self.client.patch(resource, key[0], key[1], {"status": patch}, subresource="status")
        self._statuses[(kind, *key)] = status
        return True

    def _current_status(self, kind: str, key: caches.ObjectKey, body: Mapping[str, Any]) -> dict[str, Any]:
        recent = self._statuses.get((kind, *key))
        return recent if recent is not None else dict(body.get("status", {}))

    async def _apply(
        self, kind: str, resource: kube.Resource, key: caches.ObjectKey, want: bodies.Manifest | None
    ) -> dict[str, Any] | None:
        """Create, patch or delete one object so that it matches ``want``; returns it as live."""
        live = self.caches.child(kind, key) if kind != "Secret" else self.caches.claim_secret(key)
        namespace = key[0]
        if want is None:
            if live is not None:
                with contextlib.suppress(errors.NotFoundError):
                    await self.client.delete(resource, namespace, live["metadata"]["name"])
                self.caches.remember(kind, key, None)
            return None
        name = want["metadata"]["name"]
        if live is None:
            try:
                created = await self.client.create(resource, namespace, diffing.creatable(want))
            except errors.ConflictError:
                live = await self.client.get(resource, namespace, name)
            else:
                self.caches.remember(kind, key, created)
                return created
        patch = diffing.patch_for({k: v for k, v in want.items() if k not in _TYPE_KEYS}, live)
        if not patch:
            return live
        patched = await self.client.patch(resource, namespace, name, patch)
        self.caches.remember(kind, key, patched)
        return patched

    # -- Workspace --------------------------------------------------------------------------

    async def workspace(self, key: caches.ObjectKey, body: Mapping[str, Any] | None = None) -> None:
        self.metrics.workqueue_depth.labels("workspace").inc()
        try:
            await self._slots.acquire()
        finally:
            self.metrics.workqueue_depth.labels("workspace").dec()
        try:
            async with self._run("workspace", key):
                await self._workspace(key, body)
        finally:
            self._slots.release()

    async def _workspace(self, key: caches.ObjectKey, given: Mapping[str, Any] | None) -> None:
        found = caches.trim(given) if given is not None else self.caches.workspace(key)
        if found is None or found["metadata"].get("deletionTimestamp"):
            return
        ws = cast(bodies.WorkspaceBody, found)
        generation = ws["metadata"].get("generation")
        class_name = ws.get("spec", {}).get("clusterClass")
        cls = self.caches.cluster_class(class_name) if class_name else None
        if class_name and cls is None:
            verdict = conditions.workspace_pending(
                "ClusterClassNotFound", f"ClusterClass {class_name!r} does not exist"
            )
            await self._workspace_status(key, ws, verdict, None, generation)
            return
        want = builders.desired(ws, cls, self.caches.grants(key), self.settings())
        deployment: dict[str, Any] | None = None
        try:
            for kind, resource in CHILDREN:
                obj = {
                    "ConfigMap": want.config_map,
                    "Service": want.service,
                    "Deployment": want.deployment,
                    "HorizontalPodAutoscaler": want.autoscaler,
                }[kind]
                live = await self._apply(kind, resource, key, obj)
                if kind == "Deployment":
                    deployment = live
        except errors.InvalidObjectError as exc:
            verdict = conditions.workspace_failed("InvalidSpec", str(exc))
            await self._workspace_status(key, ws, verdict, None, generation)
            raise errors.InvalidSpecError("InvalidSpec", str(exc)) from exc
        verdict = conditions.workspace(want.replicas, cast(bodies.DeploymentBody | None, deployment))
        claims_of = [c for c in map(self.caches.claim, self.caches.claims_of_workspace(key)) if c is not None]
        unusable = claims.unusable_datastores(
            list(ws.get("spec", {}).get("datastores", [])),
            claims_of,
            {g.datastore for g in self.caches.grants(key)},
        )
        verdict = conditions.with_datastores(verdict, unusable)
        problem = self.pod_health.problem(key)
        verdict = conditions.with_artifact(verdict, (problem.reason, problem.message) if problem else None)
        await self._workspace_status(key, ws, verdict, deployment, generation)

    async def _workspace_status(
        self,
        key: caches.ObjectKey,
        ws: bodies.WorkspaceBody,
        verdict: conditions.Verdict,
        deployment: Mapping[str, Any] | None,
        generation: int | None,
    ) -> None:
        current = self._current_status("Workspace", key, ws)
        merged = conditions.merge(
            current.get("conditions", []), verdict.conditions, generation=generation, now=now_iso()
        )
        status: dict[str, Any] = {"phase": verdict.phase, "conditions": merged}
        if generation is not None:
            status["observedGeneration"] = generation
        dep_status = (deployment or {}).get("status", {})
        status["replicas"] = int(dep_status.get("replicas", 0))
        status["readyReplicas"] = int(dep_status.get("readyReplicas", 0))
        await self._write_status("Workspace", kube.WORKSPACES, key, ws.get("status", {}), status)
        self.reporter.workspace_changed(key, verdict.phase, merged)

    # -- Datastore --------------------------------------------------------------------------

    async def datastore(self, key: caches.ObjectKey, body: Mapping[str, Any] | None = None) -> None:
        async with self._run("datastore", key):
            found = caches.trim(body) if body is not None else self.caches.datastore(key)
            if found is None or found["metadata"].get("deletionTimestamp"):
                return
            ds = cast(bodies.DatastoreBody, found)
            secret = ds.get("spec", {}).get("endpointSecretRef", {}).get("name", "")
            verdict = conditions.datastore(self.caches.secret_exists((key[0], secret)), secret)
            await self._simple_status("Datastore", kube.DATASTORES, key, found, verdict, {})

    async def _simple_status(
        self,
        kind: str,
        resource: kube.Resource,
        key: caches.ObjectKey,
        body: Mapping[str, Any],
        verdict: conditions.Verdict,
        extra: Mapping[str, Any],
    ) -> None:
        generation = body["metadata"].get("generation")
        current = self._current_status(kind, key, body)
        merged = conditions.merge(
            current.get("conditions", []), verdict.conditions, generation=generation, now=now_iso()
        )
        status: dict[str, Any] = {"phase": verdict.phase, "conditions": merged, **extra}
        if generation is not None:
            status["observedGeneration"] = generation
        await self._write_status(kind, resource, key, body.get("status", {}), status)

    # -- ResourceClaim ----------------------------------------------------------------------

    async def claim(self, key: caches.ObjectKey, body: Mapping[str, Any] | None = None) -> None:
        async with self._run("resourceclaim", key):
            found = caches.trim(body) if body is not None else self.caches.claim(key)
            if found is None or found["metadata"].get("deletionTimestamp"):
                return
            claim = cast(bodies.ResourceClaimBody, found)
            spec = claim.get("spec", {})
            ds_key = claims.datastore_key(key[0], spec.get("datastore", ""))
            datastore = self.caches.datastore(ds_key)
            endpoint_name = ""
            if datastore is not None:
                endpoint_name = datastore.get("spec", {}).get("endpointSecretRef", {}).get("name", "")
            verdict = claims.evaluate(
                claim,
                datastore,
                secret_exists=self.caches.secret_exists((ds_key[0], endpoint_name)),
                skip_signature=self.skip_signature,
                dev_auto_grant=self.dev_auto_grant,
            )
            secret_name = builders.claim_secret_name(key[1])
            secret_key = (key[0], str(secret_name))
            want: bodies.Manifest | None = None
            if verdict.phase == "Ready" and datastore is not None:
                try:
                    endpoint = await self.client.get(kube.SECRETS, ds_key[0], endpoint_name)
                except errors.NotFoundError:
                    verdict = conditions.claim_pending(
                        "DatastoreNotValidated", f"the endpoint Secret {endpoint_name!r} does not exist"
                    )
                else:
                    want = builders.claim_secret(claim, datastore, cast(bodies.SecretBody, endpoint))
            await self._apply("Secret", kube.SECRETS, secret_key, want)
            extra = {
                "secretName": str(secret_name) if want is not None else None,
                "secretDigest": builders.data_digest(want["data"]) if want is not None else None,
            }
            before = self._current_status("ResourceClaim", key, found)
            await self._simple_status("ResourceClaim", kube.RESOURCECLAIMS, key, found, verdict, extra)
            if verdict.condition("Ready").reason == claims.AUTO_GRANTED:
                self._audit_auto_grant(key, claim, before, verdict)

    def _audit_auto_grant(
        self,
        key: caches.ObjectKey,
        claim: bodies.ResourceClaimBody,
        before: Mapping[str, Any],
        verdict: conditions.Verdict,
    ) -> None:
        """Say once per grant (not per reconcile) that dev mode granted what production would not."""
        was: Mapping[str, Any] = next(
            (c for c in before.get("conditions", []) if c.get("type") == "Ready"), {}
        )
        ready = verdict.condition("Ready")
        said = (ready.reason, ready.message)
        if (was.get("reason"), was.get("message")) == said or self._auto_grants_said.get(key) == said:
            # already said for this grant: the status carried it, or a reconcile that read the
            # claim before this process's own status write reached the cache said it
            return
        self._auto_grants_said[key] = said
        self.metrics.claims_dev_auto_granted_total.inc()
        spec = claim.get("spec", {})
        logger.warning(
            "resource claim %s/%s auto-granted in dev mode: %s",
            *key,
            ready.message,
            extra={
                "ctx": {
                    "audit": "dev_auto_grant",
                    "claim": "/".join(key),
                    "datastore": spec.get("datastore", ""),
                    "workspace": spec.get("workspace", ""),
                    "permission": spec.get("permission", ""),
                    "granted_by": spec.get("grantedBy", ""),
                    "signed": bool(spec.get("signature")),
                }
            },
        )

    async def claim_deleted(self, key: caches.ObjectKey) -> None:
        """The claim is gone: its credentials go with it (GC would too; this is immediate)."""
        secret_name = builders.claim_secret_name(key[1])
        with contextlib.suppress(errors.NotFoundError):
            await self.client.delete(kube.SECRETS, key[0], secret_name)
        self.caches.remember("Secret", (key[0], str(secret_name)), None)


Reconcile = Callable[[caches.ObjectKey], Awaitable[None]]


class Nudger:
    """Runs reconciles triggered by other objects' events: coalesced, retried with backoff."""

    def __init__(
        self,
        metrics: metrics.Metrics,
        *,
        delay: float = 0.05,
        backoff: tuple[float, ...] = (1, 2, 5, 10, 30, 60),
    ) -> None:
        self._metrics = metrics
        self._delay = delay
        self._backoff = backoff
        self._pending: set[tuple[str, str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def nudge(self, controller: str, key: caches.ObjectKey, reconcile: Reconcile) -> None:
        token = (controller, *key)
        if token in self._pending:
            return
        self._pending.add(token)
        self._metrics.workqueue_depth.labels(controller).inc()
        task = asyncio.get_running_loop().create_task(self._run(token, key, reconcile))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, token: tuple[str, str, str], key: caches.ObjectKey, reconcile: Reconcile) -> None:
        controller = token[0]
        attempt = 0
        await asyncio.sleep(self._delay)
        while True:
            # Leaving the pending set before running lets a nudge that arrives during the run
            # schedule one more pass, so that no change is missed.
            self._pending.discard(token)
            self._metrics.workqueue_depth.labels(controller).dec()
            try:
                await reconcile(key)
                return
            except errors.InvalidSpecError as exc:
                logger.warning("%s %s/%s: %s", controller, *key, exc)
                return
            except errors.FAILURES as exc:
                delay = self._backoff[min(attempt, len(self._backoff) - 1)]
                attempt += 1
                logger.warning(
                    "%s %s/%s failed, retry in %ss: %s",
                    controller,
                    *key,
                    delay,
                    exc,
                    extra={"ctx": {"controller": controller, "object": "/".join(key)}},
                )
                if token in self._pending:
                    return  # a newer nudge will run it
                self._pending.add(token)
                self._metrics.workqueue_depth.labels(controller).inc()
                await asyncio.sleep(delay)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
