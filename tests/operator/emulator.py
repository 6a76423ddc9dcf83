"""kmock's KubernetesEmulator, plus the object identity every API server stamps.

The emulator is a plain store. Two stamps of a real API server matter to kopf, so this subclass
adds them and nothing else:

- ``metadata.uid`` (and ``creationTimestamp``) on create: kopf keys its indexes by
  (namespace, name, uid); without uids a Service and a ConfigMap of the same name would evict
  each other from kopf's indexes.
- a monotonically increasing ``metadata.resourceVersion`` on every write: kopf uses it to
  recognise the echo of its own patches; without it kopf re-processes stale events.

No resourceVersion *conflicts*, selectors, status-subresource separation or garbage collection
are emulated: those behaviours are tested in the builders and in e2e-kind.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from typing import Any

import kmock
from kmock._internal import enums, rendering

DAP_RESOURCES: dict[str, tuple[str, bool, set[str]]] = {
    "dap.io/v1alpha1/clusterclasses": ("ClusterClass", False, set()),
    "dap.io/v1alpha1/workspaces": ("Workspace", True, {"status"}),
    "dap.io/v1alpha1/datastores": ("Datastore", True, {"status"}),
    "dap.io/v1alpha1/resourceclaims": ("ResourceClaim", True, {"status"}),
    "apps/v1/deployments": ("Deployment", True, {"status"}),
    "v1/services": ("Service", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/secrets": ("Secret", True, set()),
    "autoscaling/v2/horizontalpodautoscalers": ("HorizontalPodAutoscaler", True, set()),
    # What kopf's observers wait for before they start:
    "v1/namespaces": ("Namespace", False, set()),
    "v1/events": ("Event", True, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, set()),
}
VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}


class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    _versions = itertools.count(1)

    async def _handle(self, request: rendering.Request) -> Any:
        if request.resource is not None and isinstance(request.data, dict):
            version = str(next(self._versions))
            meta = request.data.setdefault("metadata", {})
            if request.action == enums.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("generation", 1)
                meta.setdefault(
                    "creationTimestamp",
                    datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                )
                meta["resourceVersion"] = version
            elif request.action == enums.action.UPDATE:
                meta["resourceVersion"] = version
        return await super()._handle(request)


def declare(emulator: kmock.KubernetesEmulator) -> None:
    """Make the emulator's discovery list everything the operator (and kopf) use."""
    for key, (kind, namespaced, subresources) in DAP_RESOURCES.items():
        emulator.resources[key] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, subresources=subresources, verbs=VERBS
        )


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def requests(emulator: kmock.KubernetesEmulator) -> list[rendering.Request]:
    return list(emulator._requests)


def writes(emulator: kmock.KubernetesEmulator, start: int = 0, *, user_agent: str | None = None) -> list[str]:
    """``METHOD path`` of every write request from index ``start`` on (optionally by one client)."""
    found = []
    for request in requests(emulator)[start:]:
        method = str(request.method).upper().rsplit(".", 1)[-1]
        if method in WRITE_METHODS:
            agent = request.headers.get("User-Agent", "")
            if user_agent is None or user_agent in agent:
                found.append(f"{method} {request.url.path}")
    return found
