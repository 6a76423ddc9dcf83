"""The Kubernetes transport of the controls: the operator's client plus list and replace.

Credentials are found as kopf finds them (in-cluster ServiceAccount first, then
``$KUBECONFIG``/``~/.kube/config``), so the controls log in exactly as the operator does.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import kopf

from dap.config import names
from dap.operator import errors as kube_errors
from dap.operator import kube

WORKSPACES = kube.Resource(names.CRD_GROUP, names.CRD_VERSION, "workspaces")
CLUSTERS = kube.Resource(names.CRD_GROUP, names.CRD_VERSION, "clusters", namespaced=False)
LEASES = kube.Resource("coordination.k8s.io", "v1", "leases")

ApiError = kube_errors.ApiError
NotFoundError = kube_errors.NotFoundError
ConflictError = kube_errors.ConflictError
ApiUnavailableError = kube_errors.ApiUnavailableError


class Client(kube.Client):
    @classmethod
    def connect(cls, info: kopf.ConnectionInfo, *, observer: kube.Observer | None = None) -> Client:
        client = super().connect(info, observer=observer)
        assert isinstance(client, Client)  # the base class builds ``cls``
        return client

    async def list(
        self, resource: kube.Resource, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        path = resource.path(namespace)
        if selector:
            path += "?labelSelector=" + urllib.parse.quote(selector, safe="")
        items: list[dict[str, Any]] = (await self._call("list", "GET", path)).get("items", [])
        return items

    async def replace(self, resource: kube.Resource, namespace: str, name: str, body: Any) -> dict[str, Any]:
        return await self._call("update", "PUT", resource.path(namespace, name), body)


def login(server: str = "") -> kopf.ConnectionInfo:
    """Credentials for the API server: ``server`` without any (tests), else kopf's discovery."""
    if server:
        return kopf.ConnectionInfo(server=server, insecure=True)
    settings = kopf.OperatorSettings()
    try:
        info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
            settings=settings
        )
    except OSError as exc:
        raise kopf.LoginError(
            "no Kubernetes credentials: not in a pod with a service account, and no readable "
            f"kubeconfig ($KUBECONFIG or ~/.kube/config): {exc}"
        ) from exc
    if info is None:
        raise kopf.LoginError("no Kubernetes credentials found (service account or kubeconfig)")
    return info
