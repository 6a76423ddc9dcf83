"""Fixtures for the operator: kmock's Kubernetes emulator, a recording control plane, a running
operator (the real kopf operator in a task of the test's event loop), and small API helpers.

The emulator serves the fast tests of probes, metrics and reports; everything about Kubernetes
objects (status subresources, generations, garbage collection, conflicts, RBAC) is tested on a
real API server in ``tests/kube``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import kmock
import pytest
from aiohttp import web

from dap.operator import options as operator_options
from dap.operator import running
from tests.kube import loopback
from tests.operator.emulator import WRITE_METHODS, Emulator, declare
from tests.operators import OperatorTasks

GROUP = "/apis/dap.io/v1alpha1"
PATHS = {
    "clusterclasses": f"{GROUP}/clusterclasses",
    "workspaces": GROUP + "/namespaces/{ns}/workspaces",
    "datastores": GROUP + "/namespaces/{ns}/datastores",
    "resourceclaims": GROUP + "/namespaces/{ns}/resourceclaims",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "services": "/api/v1/namespaces/{ns}/services",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "horizontalpodautoscalers": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
}
RESOURCES = {
    "clusterclasses": "dap.io/v1alpha1/clusterclasses",
    "workspaces": "dap.io/v1alpha1/workspaces",
    "datastores": "dap.io/v1alpha1/datastores",
    "resourceclaims": "dap.io/v1alpha1/resourceclaims",
    "deployments": "apps/v1/deployments",
    "services": "v1/services",
    "configmaps": "v1/configmaps",
    "secrets": "v1/secrets",
    "pods": "v1/pods",
    "horizontalpodautoscalers": "autoscaling/v2/horizontalpodautoscalers",
}


class Api:
    """What a test (or kubectl, or the kube-controller-manager) does to the emulated cluster."""

    def __init__(self, emulator: Emulator, server: kmock.Server) -> None:
        self.emulator = emulator
        self.server = server

    @property
    def url(self) -> str:
        return str(self.server.url).rstrip("/")

    def _path(self, plural: str, ns: str | None, name: str | None = None) -> str:
        path = PATHS[plural].format(ns=ns or "default")
        return f"{path}/{name}" if name else path

    async def create(self, plural: str, body: dict[str, Any]) -> None:
        ns = body["metadata"].get("namespace")
        async with self.server.client.post(self._path(plural, ns), json=body) as response:
            assert response.status < 300, await response.text()

    async def patch(
        self, plural: str, ns: str | None, name: str, patch: dict[str, Any], sub: str = ""
    ) -> None:
        path = self._path(plural, ns, name) + (f"/{sub}" if sub else "")
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.server.client.patch(path, json=patch, headers=headers) as response:
            assert response.status < 300, await response.text()

    async def delete(self, plural: str, ns: str | None, name: str) -> None:
        async with self.server.client.delete(self._path(plural, ns, name)) as response:
            assert response.status < 300, await response.text()

    def get(self, plural: str, ns: str | None, name: str) -> dict[str, Any] | None:
        key = (kmock.resource(RESOURCES[plural]), ns, name)
        if key not in self.emulator.objects:
            return None
        obj = self.emulator.objects[key]
        if obj.deleted:
            return None
        return _plain(obj.raw)

    def mark(self) -> int:
        return len(self.emulator.log)

    def operator_writes(self, start: int) -> list[str]:
        """Write requests made by the operator (not by the test) since ``mark()`` gave ``start``."""
        return [
            f"{r.method} {r.path}"
            for r in self.emulator.log[start:]
            if r.method in WRITE_METHODS and not r.user_agent.startswith("kmock/")
        ]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    return value


async def wait_for(predicate: Callable[[], Any], within: float = 10.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``within`` s."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            value = predicate()
        except (KeyError, TypeError, IndexError, StopIteration):
            value = None
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        yield Api(emulator, server)


@dataclass
class Control:
    """A real control-plane stand-in on 127.0.0.1 recording every report it receives."""

    url: str = ""
    node_health: list[dict[str, Any]] = field(default_factory=list)
    workspace_status: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    fail: bool = False


@pytest.fixture
async def control() -> AsyncIterator[Control]:
    state = Control()

    async def node_health(request: web.Request) -> web.Response:
        if state.fail:
            return web.Response(status=503)
        state.node_health.append(await request.json())
        return web.json_response({}, status=202)

    async def workspace_status(request: web.Request) -> web.Response:
        if state.fail:
            return web.Response(status=503)
        state.workspace_status.append(await request.json())
        return web.json_response({}, status=202)

    async def keys(request: web.Request) -> web.Response:
        if state.fail:
            return web.Response(status=503)
        return web.json_response({"keys": [{"id": k[:16], "public_key": k} for k in state.keys]})

    app = web.Application()
    app.router.add_post("/v1/node-health", node_health)
    app.router.add_post("/v1/workspace-status", workspace_status)
    app.router.add_get("/v1/keys", keys)
    async with loopback.serving(app) as state.url:
        yield state


class Operators(OperatorTasks):
    """Starts the real kopf operator against the emulator (call it); stops them all at teardown.

    Operators are cancelled rather than stopped by the flag: a graceful stop waits 5 s for
    "hung" tasks, and in a shared event loop kopf counts the emulator's watch-serving tasks
    among them. Only one should run at a time: kopf treats every task of the loop as its own.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        super().__init__()

    async def __call__(self, **overrides: Any) -> running.Runtime:
        options = operator_options.Options(
            server=self.api.url,
            health_probe_bind_address="127.0.0.1:0",
            metrics_bind_address="127.0.0.1:0",
            **{"resource_image": "example.test/dap:1.0", **overrides},
        )
        runtime, task = self.start(options)
        await wait_for(lambda: runtime.ready() or task.done(), within=15, what="operator ready")
        if task.done():
            task.result()  # raise what stopped it
        return runtime


StartOperator = Operators


@pytest.fixture
async def start_operator(api: Api) -> AsyncIterator[Operators]:
    operators = Operators(api)
    yield operators
    await operators.stop_all()
