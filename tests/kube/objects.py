"""Bodies the tests create, and the one part of a node the tests play: the kubelet's pod status.

There is no kubelet (and no scheduler) in the test control plane. Where a test needs a workspace
to become Ready, ``run_pods`` marks the workspace's pods Running and Ready through the pods'
status subresource, as a kubelet would; everything after that — ReplicaSet and Deployment
status, the operator reading them — is the real controllers' work.
"""

from __future__ import annotations

import base64
from typing import Any

from dap.operator import claims
from tests.kube.client import Api

PRIVATE, PUBLIC = claims.keygen()


def workspace(ns: str, name: str = "shop", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def cluster_class(
    name: str = "standard", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "ClusterClass",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def secret(ns: str, name: str = "orders-endpoint", **data: str) -> dict[str, Any]:
    encoded = {
        k: base64.b64encode(v.encode()).decode()
        for k, v in (data or {"host": "db", "password": "pw"}).items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "data": encoded,
    }


def datastore(ns: str, allowed: list[str] | None = None, public: str = PUBLIC) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Datastore",
        "metadata": {"name": "orders", "namespace": ns},
        "spec": {
            "driver": "postgres",
            "endpointSecretRef": {"name": "orders-endpoint"},
            "allowedTenants": ["shop"] if allowed is None else allowed,
            "owner": "alice",
            "ownerPublicKey": public,
        },
    }


def claim(
    ns: str, name: str = "shop-orders", workspace: str = "shop", signature: str | None = None
) -> dict[str, Any]:
    grant = claims.Grant("orders", workspace, "read_write", "alice", "2026-01-02T03:04:05Z")
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "datastore": grant.datastore,
            "workspace": grant.workspace,
            "permission": grant.permission,
            "grantedBy": grant.granted_by,
            "grantedAt": grant.granted_at,
            "signature": signature or claims.sign(grant, PRIVATE),
        },
    }


async def run_pods(api: Api, ns: str, workspace: str) -> int:
    """Play the kubelet: mark every pod of ``workspace`` Running and Ready; returns how many."""
    pods = await api.list("pods", ns, f"dap.io/workspace={workspace}")
    for pod in pods:
        if pod.get("status", {}).get("phase") == "Running":
            continue
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        }
        await api.patch("pods", ns, pod["metadata"]["name"], {"status": status}, sub="status")
    return len(pods)


async def status(api: Api, plural: str, ns: str, name: str) -> dict[str, Any]:
    obj = await api.get(plural, ns, name) or {}
    result: dict[str, Any] = obj.get("status", {})
    return result


async def phase(api: Api, plural: str, ns: str, name: str) -> str | None:
    value: str | None = (await status(api, plural, ns, name)).get("phase")
    return value


async def condition(api: Api, plural: str, ns: str, name: str, type_: str) -> dict[str, Any] | None:
    found = (await status(api, plural, ns, name)).get("conditions", [])
    return next((c for c in found if c["type"] == type_), None)
