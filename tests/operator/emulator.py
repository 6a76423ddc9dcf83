"""kmock's KubernetesEmulator, plus the object identity every API server stamps.

The emulator is a plain store. Two stamps of a real API server matter to kopf, so this subclass
adds them and nothing else:

- ``metadata.uid`` (and ``creationTimestamp``) on create: kopf keys its indexes by
  (namespace, name, uid); without uids a Service and a ConfigMap of the same name would evict
  each other from kopf's indexes.
- a monotonically increasing ``metadata.resourceVersion`` on every write: kopf uses it to
  recognise the echo of its own patches; without it kopf re-processes stale events.

No resourceVersion *conflicts*, selectors, status-subresource separation or garbage collection
are emulated: the operator's behaviour tests run on a real API server (``tests/kube``). The
emulator stays for the fast tests of probes, metrics and reports, and as the benchmark's
baseline.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Logged:
    method: str
    path: str
    user_agent: str
    watch: bool


class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """The emulator with identity stamps, and a request log that stays fast at thousands of calls.

    kmock matches each request against its whole request history (its DSL can address past
    requests), which makes a long run quadratic. A completed request is therefore dropped from
    that history and kept in ``log`` instead, which is what the tests and the benchmark count.
    """

    _versions = itertools.count(1)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.log: list[Logged] = []

    async def _handle(self, request: rendering.Request) -> Any:
        method = str(request.method).upper().rsplit(".", 1)[-1]
        watch = str(request.params.get("watch", "")).lower() in ("true", "1")
        self.log.append(Logged(method, request.url.path, request.headers.get("User-Agent", ""), watch))
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
        try:
            return await super()._handle(request)
        finally:
            with contextlib.suppress(ValueError):
                self._requests.remove(request)


def declare(emulator: kmock.KubernetesEmulator) -> None:
    """Make the emulator's discovery list everything the operator (and kopf) use."""
    for key, (kind, namespaced, subresources) in DAP_RESOURCES.items():
        emulator.resources[key] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, subresources=subresources, verbs=VERBS
        )


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
