"""The async client: six verbs over aiohttp, authenticated with a ``kopf.ConnectionInfo``.

The official ``kubernetes`` client is synchronous and heavy; kopf's own client is private. This
is the thin transport both the operator and the controls use, logged in with the very
credentials kopf logged in with (so tests point both at one API server with one login). Errors
are translated into ``errors`` at the boundary. Patches are JSON merge patches
(``application/merge-patch+json``), which every kind supports (lists are replaced wholesale).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import kopf

from dap.kube import errors
from dap.kube.resources import Resource

Observer = Callable[[str, int], None]  # (verb, HTTP status; 0 when no answer)


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https") or info.insecure:
        return False
    cadata = info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data
    if cadata and "BEGIN CERTIFICATE" not in cadata:
        cadata = base64.b64decode(cadata).decode()
    cafile = os.fsdecode(info.ca_path) if info.ca_path else None
    context = ssl.create_default_context(cafile=cafile, cadata=cadata or None)
    cert, key = info.certificate_path, info.private_key_path
    # ssl loads a client certificate only from files: inline data is written to files that live
    # only while it loads (a private key must not stay behind in /tmp, one file per connect).
    written: list[str] = []
    try:
        if info.certificate_data:
            cert = _to_file(info.certificate_data, written)
        if info.private_key_data:
            key = _to_file(info.private_key_data, written)
        if cert:
            context.load_cert_chain(os.fsdecode(cert), os.fsdecode(key) if key else None)
    finally:
        for path in written:
            os.unlink(path)
    return context


def _to_file(data: str | bytes, written: list[str]) -> str:
    raw = data.encode() if isinstance(data, str) else data
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle = tempfile.NamedTemporaryFile(prefix="dap-kube-", delete=False)  # noqa: SIM115
    written.append(handle.name)
    with handle:
        handle.write(raw)
    return handle.name


class Client:
    """get, list, create, replace, merge-patch and delete; every call counted through ``observer``."""

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

    def _observe(self, verb: str, status: int) -> None:
        if self._observer is not None:
            self._observer(verb, status)

    async def _call(
        self, verb: str, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with self._session.request(
                method, self._server + path, json=body, headers=headers
            ) as response:
                status = response.status
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._observe(verb, 0)
            raise errors.ApiUnavailableError(f"{method} {path}: {exc!r}") from exc
        self._observe(verb, status)
        if status >= 400:
            raise errors.for_status(status, _reason(text), method=method, path=path)
        data = json.loads(text) if text else {}
        return data if isinstance(data, dict) else {}

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._call("get", "GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        path = resource.path(namespace)
        if selector:
            path += "?labelSelector=" + urllib.parse.quote(selector, safe="")
        items: list[dict[str, Any]] = (await self._call("list", "GET", path)).get("items", [])
        return items

    async def create(
        self, resource: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._call("create", "POST", resource.path(namespace), dict(body))

    async def replace(
        self, resource: Resource, namespace: str | None, name: str, body: Any
    ) -> dict[str, Any]:
        return await self._call("replace", "PUT", resource.path(namespace, name), body)

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
        return await self._call("patch", "PATCH", path, dict(patch), "application/merge-patch+json")

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> None:
        await self._call("delete", "DELETE", resource.path(namespace, name))


def _reason(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    return str(data.get("message") or data.get("reason") or text[:200]) if isinstance(data, dict) else text
