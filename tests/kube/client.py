"""What a test does to the real API server: an async client with the administrator's certificate.

It is deliberately not the operator's ``kube.Client``: a test that checked the operator's writes
with the operator's own transport could hide a fault they share. Answers come back as plain
dicts; a failed write raises ``ApiError`` carrying the status, so tests can assert on 409/422.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

T = TypeVar("T")

GROUP = "/apis/dap.io/v1alpha1"
PATHS = {
    "namespaces": "/api/v1/namespaces",
    "clusterclasses": f"{GROUP}/clusterclasses",
    "clusters": f"{GROUP}/clusters",
    "leases": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "customresourcedefinitions": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "clusterroles": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "workspaces": GROUP + "/namespaces/{ns}/workspaces",
    "datastores": GROUP + "/namespaces/{ns}/datastores",
    "resourceclaims": GROUP + "/namespaces/{ns}/resourceclaims",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "replicasets": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "services": "/api/v1/namespaces/{ns}/services",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "serviceaccounts": "/api/v1/namespaces/{ns}/serviceaccounts",
    "kopfpeerings": "/apis/kopf.dev/v1/namespaces/{ns}/kopfpeerings",
    "horizontalpodautoscalers": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
}
RETRIES_429 = 10
CLUSTER_SCOPED = frozenset(
    {"namespaces", "clusterclasses", "clusters", "customresourcedefinitions", "clusterroles"}
)


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: dict[str, Any]) -> None:
        super().__init__(f"{method} {path}: {status} {body.get('reason', '')}: {body.get('message', body)}")
        self.status = status
        self.body = body


class Api:
    """create/get/list/patch/replace/delete over aiohttp, as the test's administrator."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        self.url = url
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context), timeout=aiohttp.ClientTimeout(total=30)
        )

    async def close(self) -> None:
        await self._session.close()

    def path(self, plural: str, ns: str | None = None, name: str | None = None, sub: str = "") -> str:
        path = PATHS[plural] if plural in CLUSTER_SCOPED else PATHS[plural].format(ns=ns or "default")
        if name:
            path += f"/{name}"
        return path + (f"/{sub}" if sub else "")

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        for attempt in range(RETRIES_429 + 1):
            async with self._session.request(
                method, self.url + path, json=body, headers=headers, params=params
            ) as answer:
                data = await answer.json(content_type=None) if answer.content_length != 0 else {}
                if answer.status == 429 and attempt < RETRIES_429:
                    # As client-go does: a new CRD's storage answers 429 while its cache fills,
                    # and priority-and-fairness sheds load the same way; wait as told.
                    await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
                    continue
                if answer.status >= 400:
                    raise ApiError(answer.status, method, path, data if isinstance(data, dict) else {})
                return data if isinstance(data, dict) else {}
        raise AssertionError("unreachable")

    async def create(self, plural: str, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        params = {"dryRun": "All", "fieldValidation": "Strict"} if dry_run else {"fieldValidation": "Strict"}
        return await self.request(
            "POST", self.path(plural, body["metadata"].get("namespace")), body, params=params
        )

    async def get(self, plural: str, ns: str | None, name: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", self.path(plural, ns, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, plural: str, ns: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else None
        items: list[dict[str, Any]] = (await self.request("GET", self.path(plural, ns), params=params))[
            "items"
        ]
        return items

    async def patch(
        self, plural: str, ns: str | None, name: str, patch: dict[str, Any], sub: str = ""
    ) -> dict[str, Any]:
        path = self.path(plural, ns, name, sub)
        return await self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    async def replace(self, plural: str, body: dict[str, Any], sub: str = "") -> dict[str, Any]:
        meta = body["metadata"]
        return await self.request("PUT", self.path(plural, meta.get("namespace"), meta["name"], sub), body)

    async def delete(self, plural: str, ns: str | None, name: str, *, missing_ok: bool = False) -> None:
        try:
            await self.request("DELETE", self.path(plural, ns, name))
        except ApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], within: float = 30.0, what: str = "condition"
) -> T:
    """Await ``probe`` until it gives a truthy value; fail naming ``what`` after ``within`` s."""
    deadline = asyncio.get_running_loop().time() + within
    last: T | None
    while True:
        try:
            last = await probe()
        except (KeyError, TypeError, IndexError, StopIteration):
            last = None  # the object is not there yet, or not in that shape yet
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(0.1)
