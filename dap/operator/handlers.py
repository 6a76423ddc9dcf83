"""kopf handlers: the thin I/O shell that turns watch events into reconciles.

``register(registry, runtime)`` declares every handler on a fresh ``kopf.OperatorRegistry`` (never
kopf's global one), so an operator can be built twice in one process: tests start one per case,
the benchmark restarts one to measure a resync.

Who triggers what:

- Workspace, Datastore, ResourceClaim: ``on.resume/create/update`` run the object's reconcile;
  errors become ``kopf.TemporaryError(delay=…)`` or ``kopf.PermanentError`` (see ``errors``).
- ClusterClass: no reconciler of its own (spec rule 6). Its events nudge the workspaces listed
  under it in the ``dap_workspaces_by_class`` index.
- Deployment, Service, ConfigMap, HPA of a workspace: their events nudge the workspace (status
  from the Deployment; drift repair for all).
- Secrets: an endpoint Secret appearing re-evaluates the Datastores naming it and their claims;
  a claim's own Secret changing re-evaluates the claim.
- ResourceClaim events nudge their workspace (credentials in or out); a deleted claim's Secret
  is deleted at once.

Indexes (``caches.KEYERS``) feed every read. kopf fills them before calling the first handler.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import kopf

from dap import listening
from dap.config import names
from dap.operator import builders, caches, errors, reconciling, reporting
from dap.operator.caches import Caches, ObjectKey
from dap.operator.options import PEERING_NAME, Options

G, V = names.CRD_GROUP, names.CRD_VERSION
MANAGED = {builders.LABEL_MANAGED_BY: builders.MANAGED_BY}
RETRY_DELAY = 5.0
CHILD_RESOURCES: tuple[tuple[str, tuple[str, str, str], str], ...] = (
    ("Deployment", ("apps", "v1", "deployments"), caches.INDEX_DEPLOYMENTS),
    ("Service", ("", "v1", "services"), caches.INDEX_SERVICES),
    ("ConfigMap", ("", "v1", "configmaps"), caches.INDEX_CONFIGMAPS),
    ("HorizontalPodAutoscaler", ("autoscaling", "v2", "horizontalpodautoscalers"), caches.INDEX_AUTOSCALERS),
)


async def guarded(call: Awaitable[None]) -> None:
    """Await a reconcile, mapping the operator's error tree onto kopf's retry semantics."""
    try:
        await call
    except errors.InvalidSpecError as exc:
        raise kopf.PermanentError(f"{exc.reason}: {exc}") from exc
    except errors.InvalidObjectError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except errors.FAILURES as exc:
        raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc


def _key(body: Mapping[str, Any]) -> caches.ObjectKey:
    meta = body.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


class Parts(Protocol):
    """What the handlers need of an operator instance (``running.Runtime`` provides it)."""

    options: Options
    caches: Caches
    reconciler: reconciling.Reconciler
    nudger: reconciling.Nudger
    reporter: reporting.Reporter
    kopf_settings: kopf.OperatorSettings | None

    def log_failure(self, controller: str, key: ObjectKey, exc: Exception) -> None: ...
    async def connect(self, info: kopf.ConnectionInfo) -> None: ...
    async def start_background(self) -> None: ...
    async def stop_background(self) -> None: ...


def register(registry: kopf.OperatorRegistry, runtime: Parts) -> None:
    """Declare every handler of the operator on ``registry``."""
    reconciler = runtime.reconciler
    nudger = runtime.nudger
    cache = runtime.caches

    # -- lifecycle ----------------------------------------------------------------------------

    @kopf.on.login(id="login", registry=registry)
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info: kopf.ConnectionInfo | None
        if runtime.options.server:
            info = kopf.ConnectionInfo(server=runtime.options.server, insecure=True)
        else:
            try:
                info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
            except OSError as exc:
                raise kopf.TemporaryError(
                    "no Kubernetes credentials: not in a pod with a service account, and no readable "
                    f"kubeconfig ($KUBECONFIG or ~/.kube/config): {exc}",
                    delay=30,
                ) from exc
        if info is not None:
            await runtime.connect(info)
        return info

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        options = runtime.options
        # A watch stream that goes silent (a known kopf failure mode behind load balancers)
        # is cut by the client after client_timeout and re-established; the server is asked
        # to end it a little earlier so the normal path is a clean reconnect.
        settings.watching.server_timeout = options.watch_server_timeout
        settings.watching.client_timeout = options.watch_server_timeout + 30
        settings.watching.connect_timeout = 10
        settings.posting.level = logging.WARNING  # no Kubernetes event per successful handler
        settings.persistence.finalizer = f"{G}/operator"
        # Our status schemas are structural, so the API server would prune kopf's status.kopf;
        # kopf keeps its handler progress in annotations instead (only while a handler retries).
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
        if options.leader_elect:
            settings.peering.standalone = False
            settings.peering.mandatory = True
            settings.peering.name = PEERING_NAME
            settings.peering.clusterwide = not options.namespace
            # Peers of equal priority all pause; a random priority per replica elects one.
            settings.peering.priority = random.randint(1, 2**31 - 1)
        else:
            settings.peering.standalone = True
        cache.attach(kwargs)
        runtime.kopf_settings = settings
        try:
            await runtime.start_background()
        except listening.ListenError as exc:  # retrying cannot free the address: end the operator
            raise kopf.PermanentError(str(exc)) from exc

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(**_: Any) -> None:
        await runtime.stop_background()

    # -- indexes ------------------------------------------------------------------------------

    def index(resource: tuple[str, ...], name: str, **filters: Any) -> None:
        kopf.index(*resource, id=name, registry=registry, **filters)(caches.KEYERS[name])

    index((G, V, "clusterclasses"), caches.INDEX_CLASSES)
    index((G, V, "workspaces"), caches.INDEX_WORKSPACES)
    index((G, V, "workspaces"), caches.INDEX_WORKSPACES_BY_CLASS)
    for _kind, resource, name in CHILD_RESOURCES:
        index(resource, name, labels=MANAGED)
    index((G, V, "datastores"), caches.INDEX_DATASTORES)
    index((G, V, "datastores"), caches.INDEX_DATASTORES_BY_SECRET)
    index((G, V, "resourceclaims"), caches.INDEX_CLAIMS)
    index((G, V, "resourceclaims"), caches.INDEX_CLAIMS_BY_WORKSPACE)
    index((G, V, "resourceclaims"), caches.INDEX_CLAIMS_BY_DATASTORE)
    index(
        ("", "v1", "secrets"),
        caches.INDEX_CLAIM_SECRETS,
        labels={**MANAGED, builders.LABEL_CLAIM: kopf.PRESENT},
    )
    index(("", "v1", "secrets"), caches.INDEX_SECRET_NAMES)

    # -- nudges -------------------------------------------------------------------------------

    def nudge_workspace(key: caches.ObjectKey) -> None:
        nudger.nudge("workspace", key, reconciler.workspace)

    def nudge_datastore(key: caches.ObjectKey) -> None:
        nudger.nudge("datastore", key, reconciler.datastore)
        for claim_key in cache.claims_of_datastore(key):
            nudger.nudge("resourceclaim", claim_key, reconciler.claim)

    # -- Workspace ----------------------------------------------------------------------------

    @kopf.on.resume(G, V, "workspaces", id="workspace", registry=registry)
    @kopf.on.create(G, V, "workspaces", id="workspace", registry=registry)
    @kopf.on.update(G, V, "workspaces", id="workspace", registry=registry)
    async def workspace(body: kopf.Body, **_: Any) -> None:
        await guarded(reconciler.workspace(_key(body), body))

    @kopf.on.event(G, V, "workspaces", id="workspace_event", registry=registry)
    async def workspace_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        reconciler.seen("Workspace", _key(body))
        if event["type"] == "DELETED":
            runtime.reporter.forget(_key(body))

    # -- ClusterClass: no reconciler, only a fan-out to its workspaces (spec rule 6) ------------

    @kopf.on.event(G, V, "clusterclasses", id="clusterclass_event", registry=registry)
    async def cluster_class_event(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event["type"] is None:
            return  # the initial listing: the workspaces' own resume handlers cover it
        for key in cache.workspaces_of_class(name):
            nudge_workspace(key)

    # -- children of workspaces ----------------------------------------------------------------

    def child_event_handler(kind: str) -> Callable[..., Awaitable[None]]:
        async def child_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
            meta = body.get("metadata", {})
            workspace = meta.get("labels", {}).get(builders.LABEL_WORKSPACE)
            if not workspace:
                return
            key = (meta.get("namespace", ""), workspace)
            cache.forget(kind, key)
            if event["type"] is not None:
                nudge_workspace(key)

        child_event.__name__ = f"{kind.lower()}_event"
        return child_event

    for kind, resource, _index in CHILD_RESOURCES:
        kopf.on.event(*resource, labels=MANAGED, id=f"{kind.lower()}_event", registry=registry)(
            child_event_handler(kind)
        )

    # -- Datastore ----------------------------------------------------------------------------

    @kopf.on.resume(G, V, "datastores", id="datastore", registry=registry)
    @kopf.on.create(G, V, "datastores", id="datastore", registry=registry)
    @kopf.on.update(G, V, "datastores", id="datastore", registry=registry)
    async def datastore(body: kopf.Body, **_: Any) -> None:
        await guarded(reconciler.datastore(_key(body), body))

    @kopf.on.event(G, V, "datastores", id="datastore_event", registry=registry)
    async def datastore_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        reconciler.seen("Datastore", key)
        if event["type"] is not None:
            for claim_key in cache.claims_of_datastore(key):
                nudger.nudge("resourceclaim", claim_key, reconciler.claim)

    @kopf.on.event("", "v1", "secrets", id="secret_event", registry=registry)
    async def secret_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        labels = body.get("metadata", {}).get("labels", {})
        claim = labels.get(builders.LABEL_CLAIM)
        if claim and labels.get(builders.LABEL_MANAGED_BY) == builders.MANAGED_BY:
            cache.forget("Secret", key)
            if event["type"] is not None:
                nudger.nudge("resourceclaim", (key[0], claim), reconciler.claim)
        if event["type"] is None:
            return
        for datastore_key in cache.datastores_using_secret(key):
            nudge_datastore(datastore_key)

    # -- ResourceClaim --------------------------------------------------------------------------

    @kopf.on.resume(G, V, "resourceclaims", id="resourceclaim", registry=registry)
    @kopf.on.create(G, V, "resourceclaims", id="resourceclaim", registry=registry)
    @kopf.on.update(G, V, "resourceclaims", id="resourceclaim", registry=registry)
    async def resource_claim(body: kopf.Body, **_: Any) -> None:
        await guarded(reconciler.claim(_key(body), body))

    @kopf.on.event(G, V, "resourceclaims", id="resourceclaim_event", registry=registry)
    async def resource_claim_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        reconciler.seen("ResourceClaim", key)
        workspace = body.get("spec", {}).get("workspace")
        if event["type"] == "DELETED":
            try:
                await reconciler.claim_deleted(key)
            except errors.FAILURES as exc:
                runtime.log_failure("resourceclaim", key, exc)
        if event["type"] is not None and workspace:
            nudge_workspace((key[0], workspace))


__all__ = ["guarded", "register"]
