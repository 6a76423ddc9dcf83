"""dap.kube — the one Kubernetes transport of the operator and the controls.

- ``resources``: ``Resource`` (REST paths) and the kinds dap reads and writes.
- ``client``: the async ``Client`` (get, list, create, replace, merge-patch, delete over aiohttp).
- ``errors``: the transport's error tree (``KubeError`` → ``ApiError`` …, ``ApiUnavailableError``).
- ``login``: credentials as kopf finds them, or one named kubeconfig.

It imports ``dap.config`` only; ``dap.server``, ``dap.control`` and ``dap.operator`` may import it
(import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

from dap.kube.client import Client, Observer
from dap.kube.errors import (
    ApiError,
    ApiUnavailableError,
    ConflictError,
    InvalidObjectError,
    KubeError,
    NotFoundError,
)
from dap.kube.login import from_kubeconfig, login
from dap.kube.resources import (
    AUTOSCALERS,
    CLUSTER_CLASSES,
    CLUSTER_PEERINGS,
    CLUSTERS,
    CONFIGMAPS,
    DATASTORES,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    PEERINGS,
    PODS,
    RESOURCECLAIMS,
    SECRETS,
    SERVICES,
    WORKSPACES,
    Resource,
)

__all__ = [
    "AUTOSCALERS",
    "CLUSTERS",
    "CLUSTER_CLASSES",
    "CLUSTER_PEERINGS",
    "CONFIGMAPS",
    "DATASTORES",
    "DEPLOYMENTS",
    "LEASES",
    "NAMESPACES",
    "PEERINGS",
    "PODS",
    "RESOURCECLAIMS",
    "SECRETS",
    "SERVICES",
    "WORKSPACES",
    "ApiError",
    "ApiUnavailableError",
    "Client",
    "ConflictError",
    "InvalidObjectError",
    "KubeError",
    "NotFoundError",
    "Observer",
    "Resource",
    "from_kubeconfig",
    "login",
]
