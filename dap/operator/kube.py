"""A small asynchronous Kubernetes API client for the objects the operator writes.

kopf watches and patches the custom resources it handles, but the operator also creates and
patches Deployments, Services, ConfigMaps, autoscalers and Secrets, and reads Secrets. The official
``kubernetes`` client is synchronous and heavy; kopf's own client is private. This module is the
thin transport: five verbs over aiohttp, authenticated with the very ``kopf.ConnectionInfo`` that
kopf logged in with (so tests point both at kmock's emulator with one login handler), errors
translated into ``errors.ApiError`` at the boundary. Patches are JSON merge patches
(``application/merge-patch+json``), which every kind supports and whose list semantics
(replace wholesale) ``diffing`` is written for.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import kopf

from dap.operator import errors

Observer = Callable[[str, int], None]  # (verb, HTTP status; 0 when no answer)


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


DEPLOYMENTS = Resource("apps", "v1", "deployments")
SERVICES = Resource("", "v1", "services")
CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
AUTOSCALERS = Resource("autoscaling", "v2", "horizontalpodautoscalers")
PEERINGS = Resource("kopf.dev", "v1", "kopfpeerings")
CLUSTER_PEERINGS = Resource("kopf.dev", "v1", "clusterkopfpeerings", namespaced=False)


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    if info.insecure:
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
    handle = tempfile.NamedTemporaryFile(prefix="dap-kube-", delete=False)  # noqa: SIM115
    with handle:
        handle.write(raw)
    return handle.name


class Client:
    """Create, read, merge-patch and delete objects; every call counted through ``observer``."""

    def __init__(
        self, session: aiohttp.ClientSession, server: str, *, observer: Observer | None = None
    ) -> None:
        self._session = session
        self._server = server.rstrip("/")
        self._observer = observer

    @classmethod
    def connect(cls, info: kopf.ConnectionInfo, *, observer: Observer | None = None) -> Client:
        headers = dict(info.as_http_headers())
        connector = aiohttp.TCPConnector(ssl=_ssl_context(info), limit=50)
        timeout = aiohttp.ClientTimeout(total=30, sock_connect=5)
        session = aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout)
        return cls(session, info.server, observer=observer)

    async def close(self) -> None:
        await self._session.close()

    async def _call(
        self, verb: str, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        url = self._server + path
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with self._session.request(method, url, json=body, headers=headers) as response:
                status = response.status
                if self._observer is not None:
                    self._observer(verb, status)
                text = await response.text()
                if status >= 400:
                    raise errors.for_status(status, _reason(text), method=method, path=path)
                data = await response.json(content_type=None) if text else {}
        except (aiohttp.ClientError, TimeoutError) as exc:
            if self._observer is not None:
                self._observer(verb, 0)
            raise errors.ApiUnavailableError(f"{method} {path}: {exc!r}") from exc
        return data if isinstance(data, dict) else {}

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self._call("get", "GET", resource.path(namespace, name))

    async def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call("create", "POST", resource.path(namespace), dict(body))

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        path = resource.path(namespace, name, subresource)
        return await self._call("patch", "PATCH", path, dict(patch), "application/merge-patch+json")

    async def delete(self, resource: Resource, namespace: str, name: str) -> None:
        await self._call("delete", "DELETE", resource.path(namespace, name))


def _reason(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    return str(data.get("message") or data.get("reason") or text[:200]) if isinstance(data, dict) else text


WRITE_VERBS = frozenset({"create", "patch", "delete"})
