"""The Kubernetes transport of the controls: six verbs over aiohttp, and the login.

It mirrors ``dap.operator.kube`` on purpose rather than importing it: ``dap.control`` and
``dap.operator`` are independent packages (import-linter contract).

Credentials are found as kopf finds them (in-cluster ServiceAccount first, then
``$KUBECONFIG``/``~/.kube/config``), so the controls log in exactly as the operator does.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from typing import Any

import aiohttp
import kopf
import yaml

from dap.config import names


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    pass


class ApiUnavailableError(Exception):
    """No answer from the API server (connection refused, reset, timed out)."""


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


WORKSPACES = Resource(names.CRD_GROUP, names.CRD_VERSION, "workspaces")
CLUSTERS = Resource(names.CRD_GROUP, names.CRD_VERSION, "clusters", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https") or info.insecure:
        return False
    cadata = info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data
    if cadata and "BEGIN CERTIFICATE" not in cadata:
        cadata = base64.b64decode(cadata).decode()
    cafile = os.fsdecode(info.ca_path) if info.ca_path else None
    context = ssl.create_default_context(cafile=cafile, cadata=cadata or None)
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data or info.private_key_data:
        cert = _to_file(info.certificate_data) if info.certificate_data else cert
        key = _to_file(info.private_key_data) if info.private_key_data else key
    if cert:
        context.load_cert_chain(os.fsdecode(cert), os.fsdecode(key) if key else None)
    return context


def _to_file(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle = tempfile.NamedTemporaryFile(prefix="dap-control-kube-", delete=False)  # noqa: SIM115
    with handle:
        handle.write(raw)
    return handle.name


class Client:
    """get, list, create, replace, merge-patch and delete over aiohttp, errors translated."""

    def __init__(self, session: aiohttp.ClientSession, server: str) -> None:
        self._session = session
        self._server = server.rstrip("/")

    @classmethod
    def connect(cls, info: kopf.ConnectionInfo) -> Client:
        headers = dict(info.as_http_headers())
        connector = aiohttp.TCPConnector(ssl=_ssl_context(info), limit=20)
        timeout = aiohttp.ClientTimeout(total=30, sock_connect=5)
        return cls(aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout), info.server)

    async def close(self) -> None:
        await self._session.close()

    async def _call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with self._session.request(
                method, self._server + path, json=body, headers=headers
            ) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiUnavailableError(f"{method} {path}: {exc!r}") from exc
        if status >= 400:
            cls = {404: NotFoundError, 409: ConflictError}.get(status, ApiError)
            raise cls(status, f"{method} {path}: {status} {_reason(text)}")
        data = json.loads(text) if text else {}
        return data if isinstance(data, dict) else {}

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._call("GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        path = resource.path(namespace)
        if selector:
            path += "?labelSelector=" + urllib.parse.quote(selector, safe="")
        items: list[dict[str, Any]] = (await self._call("GET", path)).get("items", [])
        return items

    async def create(
        self, resource: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._call("POST", resource.path(namespace), dict(body))

    async def replace(
        self, resource: Resource, namespace: str | None, name: str, body: Any
    ) -> dict[str, Any]:
        return await self._call("PUT", resource.path(namespace, name), body)

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        path = resource.path(namespace, name, subresource)
        return await self._call("PATCH", path, dict(patch), "application/merge-patch+json")

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> None:
        await self._call("DELETE", resource.path(namespace, name))


def _reason(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    return str(data.get("message") or data.get("reason") or text[:200]) if isinstance(data, dict) else text


def from_kubeconfig(path: str) -> kopf.ConnectionInfo:
    """The current context of one kubeconfig file (token or client certificate, inline data).

    Lets one process hold two identities (a test runs the region and a cluster control side by
    side), which kopf's discovery through ``$KUBECONFIG`` cannot.
    """
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    context = _named(config, "contexts", config["current-context"])["context"]
    cluster = _named(config, "clusters", context["cluster"])["cluster"]
    user = _named(config, "users", context["user"])["user"]
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        scheme="Bearer" if user.get("token") else None,
        token=user.get("token"),
        certificate_data=user.get("client-certificate-data"),
        private_key_data=user.get("client-key-data"),
        default_namespace=context.get("namespace"),
    )


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry
            return found
    raise kopf.LoginError(f"kubeconfig has no {section} entry named {name!r}")


def login(server: str = "", kubeconfig: str = "") -> kopf.ConnectionInfo:
    """Credentials: ``server`` without any (tests), a given kubeconfig, else kopf's discovery."""
    if server:
        return kopf.ConnectionInfo(server=server, insecure=True)
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
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
