"""Where the kinds live: ``Resource`` builds the REST paths; the kinds dap reads and writes."""

from __future__ import annotations

import dataclasses

from dap.config import names


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


def _dap(plural: str, *, namespaced: bool = True) -> Resource:
    return Resource(names.CRD_GROUP, names.CRD_VERSION, plural, namespaced)


NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
SERVICES = Resource("", "v1", "services")
CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
PODS = Resource("", "v1", "pods")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
AUTOSCALERS = Resource("autoscaling", "v2", "horizontalpodautoscalers")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
PEERINGS = Resource("kopf.dev", "v1", "kopfpeerings")
CLUSTER_PEERINGS = Resource("kopf.dev", "v1", "clusterkopfpeerings", namespaced=False)

WORKSPACES = _dap("workspaces")
DATASTORES = _dap("datastores")
RESOURCECLAIMS = _dap("resourceclaims")
CLUSTERS = _dap("clusters", namespaced=False)
CLUSTER_CLASSES = _dap("clusterclasses", namespaced=False)
