"""The operator's public names, its error mapping onto kopf, and the concurrency bound."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

import dap.operator
from dap.operator import caches, errors, handlers, metrics, options, reconciling, reporting, running
from tests.kube import loopback


def test_public_names_are_deliberate() -> None:
    assert sorted(dap.operator.__all__) == [
        "ClaimGrant",
        "Desired",
        "Grant",
        "OperatorError",
        "OperatorSettings",
        "Options",
        "Runtime",
        "desired",
        "keygen",
        "run",
        "sign",
        "verify",
    ]


async def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("error", "kopf_error"),
    [
        pytest.param(errors.InvalidSpecError("InvalidSpec", "bad"), kopf.PermanentError, id="invalid-spec"),
        pytest.param(errors.InvalidObjectError(422, "bad"), kopf.PermanentError, id="refused-object"),
        pytest.param(errors.ConflictError(409, "conflict"), kopf.TemporaryError, id="conflict"),
        pytest.param(errors.ApiUnavailableError("down"), kopf.TemporaryError, id="unavailable"),
        pytest.param(errors.ApiError(500, "boom"), kopf.TemporaryError, id="server-error"),
    ],
)
async def test_errors_map_onto_kopf_retry_semantics(error: Exception, kopf_error: type[Exception]) -> None:
    with pytest.raises(kopf_error) as caught:
        await handlers.guarded(_raise(error))
    assert caught.value.__cause__ is error
    if isinstance(caught.value, kopf.TemporaryError):
        assert caught.value.delay == handlers.RETRY_DELAY


class CountingReconciler(reconciling.Reconciler):
    """The real slot logic of ``workspace()``, with a body that only counts who is inside."""

    inside = 0
    most = 0

    async def _workspace(self, key: caches.ObjectKey, given: Mapping[str, Any] | None) -> None:
        type(self).inside += 1
        type(self).most = max(type(self).most, type(self).inside)
        await asyncio.sleep(0.02)
        type(self).inside -= 1


@pytest.mark.parametrize("limit", [1, 3])
async def test_workspace_concurrency_bounds_reconciles(limit: int) -> None:
    m = metrics.Metrics()
    reconciler = CountingReconciler(
        client=None,  # type: ignore[arg-type]  # never reached: _workspace is replaced
        caches=caches.Caches(),
        metrics=m,
        reporter=reporting.Reporter(control_url="", cluster="c", node="n", metrics=m),
        resource_image="i",
        control_cluster_url="",
        trust=reconciling.Trust(),
        workspace_concurrency=limit,
    )
    CountingReconciler.most = 0
    await asyncio.gather(*(reconciler.workspace(("ns", f"w{i}")) for i in range(10)))
    assert CountingReconciler.most == limit
    assert m.workqueue_depth.labels("workspace")._value.get() == 0
    assert m.reconcile_total.labels("workspace")._value.get() == 10


async def test_each_reconcile_is_a_span_when_tracing_is_on() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dap import tracing

    m = metrics.Metrics()
    reconciler = CountingReconciler(
        client=None,  # type: ignore[arg-type]  # never reached: _workspace is replaced
        caches=caches.Caches(),
        metrics=m,
        reporter=reporting.Reporter(control_url="", cluster="c", node="n", metrics=m),
        resource_image="i",
        control_cluster_url="",
        trust=reconciling.Trust(),
        workspace_concurrency=2,
    )
    exporter = InMemorySpanExporter()
    with tracing.enabled_for_tests(exporter):
        await asyncio.gather(*(reconciler.workspace(("ns", f"w{i}")) for i in range(3)))
    spans = exporter.get_finished_spans()
    assert sorted(s.attributes["dap.object"] for s in spans if s.name == "reconcile workspace") == [
        "ns/w0",
        "ns/w1",
        "ns/w2",
    ]


@pytest.mark.parametrize(
    ("options", "scope"),
    [
        pytest.param(
            options.Options(), {"clusterwide": True, "namespaces": [], "standalone": True}, id="all"
        ),
        pytest.param(
            options.Options(namespace="tenants"),
            {"clusterwide": False, "namespaces": ["tenants"], "standalone": True},
            id="one-namespace",
        ),
        pytest.param(
            options.Options(leader_elect=True),
            {"clusterwide": True, "namespaces": [], "standalone": False},
            id="peering",
        ),
    ],
)
def test_kopf_scope(options: options.Options, scope: dict[str, Any]) -> None:
    # Namespaced mode is not run on kmock 0.8: its path parser fails on GET /api/v1/namespaces,
    # which kopf's namespace observer needs in that mode. e2e-kind runs the real thing.
    assert running.kopf_scope(options) == scope


async def test_a_refused_object_marks_the_workspace_failed_and_is_permanent() -> None:
    """A real HTTP server playing an API server that refuses the Deployment (422)."""
    from aiohttp import web

    from dap import kube

    status_patches: list[dict[str, Any]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        if request.match_info["plural"] == "deployments":
            message = 'spec.template.spec.containers[0].resources.limits[memory]: Invalid value: "lots"'
            return web.json_response({"kind": "Status", "code": 422, "message": message}, status=422)
        return web.json_response(body, status=201)

    async def patch_status(request: web.Request) -> web.Response:
        status_patches.append(await request.json())
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/{plural}", create)
    app.router.add_post("/apis/apps/v1/namespaces/{ns}/{plural}", create)
    app.router.add_patch("/apis/dap.io/v1alpha1/namespaces/{ns}/workspaces/{name}/status", patch_status)
    m = metrics.Metrics()
    async with loopback.serving(app) as url:
        client = kube.Client.connect(kopf.ConnectionInfo(server=url), observer=m.observe_request)
        reconciler = reconciling.Reconciler(
            client=client,
            caches=caches.Caches(),
            metrics=m,
            reporter=reporting.Reporter(control_url="", cluster="c", node="n", metrics=m),
            resource_image="i",
            control_cluster_url="",
            trust=reconciling.Trust(),
        )
        body = {"metadata": {"name": "shop", "namespace": "tenants", "uid": "u", "generation": 2}, "spec": {}}
        try:
            with pytest.raises(errors.InvalidSpecError) as caught:
                await reconciler.workspace(("tenants", "shop"), body)
            with pytest.raises(kopf.PermanentError):
                await handlers.guarded(_raise(caught.value))
        finally:
            await client.close()
    (patch,) = status_patches
    assert patch["status"]["phase"] == "Failed"
    degraded = next(c for c in patch["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["observedGeneration"]) == (
        "True",
        "InvalidSpec",
        2,
    )
    assert "Invalid value" in degraded["message"]
    assert m.reconcile_errors_total.labels("workspace")._value.get() == 1
    assert m.kube_requests_total.labels("create", "4xx")._value.get() == 1
