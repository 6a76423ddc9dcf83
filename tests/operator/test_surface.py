"""The operator's public names, its error mapping onto kopf, and the concurrency bound."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

import dap.operator
from dap.operator import caches, errors, handlers, metrics, reconciling, reporting, running


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


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        pytest.param(404, errors.NotFoundError, id="404"),
        pytest.param(409, errors.ConflictError, id="409"),
        pytest.param(422, errors.InvalidObjectError, id="422"),
        pytest.param(500, errors.ApiError, id="500"),
    ],
)
def test_api_status_to_error_class(status: int, cls: type[errors.ApiError]) -> None:
    error = errors.for_status(status, "m", method="GET", path="/x")
    assert type(error) is cls
    assert error.status == status


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


@pytest.mark.parametrize(
    ("options", "scope"),
    [
        pytest.param(
            running.Options(), {"clusterwide": True, "namespaces": [], "standalone": True}, id="all"
        ),
        pytest.param(
            running.Options(namespace="tenants"),
            {"clusterwide": False, "namespaces": ["tenants"], "standalone": True},
            id="one-namespace",
        ),
        pytest.param(
            running.Options(leader_elect=True),
            {"clusterwide": True, "namespaces": [], "standalone": False},
            id="peering",
        ),
    ],
)
def test_kopf_scope(options: running.Options, scope: dict[str, Any]) -> None:
    # Namespaced mode is not run on kmock 0.8: its path parser fails on GET /api/v1/namespaces,
    # which kopf's namespace observer needs in that mode. e2e-kind runs the real thing.
    assert running.kopf_scope(options) == scope
