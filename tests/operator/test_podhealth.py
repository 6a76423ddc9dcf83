"""The operator's reading of the pods' /health: judgement (pure), the condition it gives, and one
sweep against real HTTP servers on loopback standing for two pods."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from dap import kube
from dap.operator import conditions, podhealth
from dap.operator.podhealth import UNKNOWN, Problem

KEY = ("e2e", "shop")


def health(phase: str | None, message: str = "") -> dict[str, Any]:
    """A body as dap.resource_pod.hosting.health writes it (the parts the operator reads)."""
    return {"status": "ok", "convergence": {"phase": phase, "message": message, "failures": 1}}


def test_judge_names_the_reason_of_each_failure() -> None:
    refused = podhealth.judge(health("failed", "verification failed: artifact a-1 has 0 valid approval(s)"))
    assert refused == Problem(
        podhealth.VERIFICATION_FAILED, "verification failed: artifact a-1 has 0 valid approval(s)"
    )
    assert podhealth.judge(health("failed", "load failed: bad table")).reason == podhealth.ARTIFACT_FAILED  # type: ignore[union-attr]
    assert podhealth.judge(health("rolled_back", "self-check")).reason == podhealth.ROLLED_BACK  # type: ignore[union-attr]
    assert podhealth.judge(health("up_to_date")) is None
    assert podhealth.judge(health("loaded")) is None
    for inconclusive in (health("fetched"), health(None), {"status": "ok"}, "not json", None):
        assert podhealth.judge(inconclusive) is UNKNOWN


def test_fold_keeps_a_problem_through_retries_and_clears_it_when_served() -> None:
    bad = Problem(podhealth.VERIFICATION_FAILED, "verification failed: x")
    first = podhealth.fold({}, {KEY: [("p-2", None), ("p-1", bad)]})
    assert first == {KEY: Problem(bad.reason, "1 of 2 pod(s), e.g. p-1: verification failed: x")}
    # a retry passes through "fetched", or the pod does not answer: the judgement stays
    assert podhealth.fold(first, {KEY: [("p-1", UNKNOWN)]}) == first
    assert podhealth.changed(first, podhealth.fold(first, {KEY: [("p-1", UNKNOWN)]})) == set()
    # a pod serving its target clears it; a workspace with no Running pod has none
    assert podhealth.fold(first, {KEY: [("p-1", None), ("p-2", UNKNOWN)]}) == {}
    assert podhealth.fold(first, {}) == {}
    assert podhealth.changed(first, {}) == {KEY}


def test_running_pods_skips_pending_terminating_and_unlabelled() -> None:
    def pod(name: str, phase: str = "Running", ip: str = "10.0.0.1", **meta: Any) -> dict[str, Any]:
        labels = {"dap.io/workspace": "shop"}
        return {
            "metadata": {"name": name, "namespace": "e2e", "labels": labels, **meta},
            "status": {"phase": phase, "podIP": ip},
        }

    items = [
        pod("a"),
        pod("b", phase="Pending"),
        pod("c", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("d", ip=""),
        {
            "metadata": {"name": "e", "namespace": "e2e", "labels": {}},
            "status": {"phase": "Running", "podIP": "1.2.3.4"},
        },
    ]
    assert podhealth.running_pods(items) == [(KEY, "a", "10.0.0.1")]


def test_with_artifact_degrades_a_serving_workspace_and_keeps_other_reasons() -> None:
    serving = conditions.workspace(
        1,
        {
            "metadata": {"name": "dap-shop", "generation": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1},
        },
    )
    assert serving.phase == "Ready"
    degraded = conditions.with_artifact(serving, (podhealth.VERIFICATION_FAILED, "1 of 1 pod(s), e.g. p: no"))
    assert degraded.phase == "Degraded"
    assert degraded.condition("Ready").status == "True"  # it still serves the version it had
    assert degraded.condition("Degraded") == conditions.Wanted(
        "Degraded", "True", podhealth.VERIFICATION_FAILED, "1 of 1 pod(s), e.g. p: no"
    )
    assert conditions.with_artifact(serving, None) is serving
    both = conditions.with_artifact(
        conditions.with_datastores(serving, {"orders": "no claim"}),
        (podhealth.ARTIFACT_FAILED, "load failed"),
    )
    assert both.condition("Degraded").reason == conditions.DATASTORE_NOT_USABLE
    assert both.condition("Degraded").message.endswith("; ArtifactFailed: load failed")
    pending = conditions.workspace_pending("ClusterClassNotFound", "no class")
    assert conditions.with_artifact(pending, (podhealth.ARTIFACT_FAILED, "x")) is pending


class _Pods(kube.Client):
    """The one API call a sweep makes (list pods), answered from a list; nothing else is called."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.selectors: list[str] = []

    async def list(
        self, resource: kube.Resource, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        assert resource is kube.PODS
        self.selectors.append(selector)
        return self.items

    async def close(self) -> None:
        return None


@pytest.fixture
async def two_pods() -> AsyncIterator[tuple[int, dict[str, dict[str, Any]]]]:
    """Two HTTP servers on 127.0.0.1 and 127.0.0.2, one port: pods' /health answering ``bodies``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bodies: dict[str, dict[str, Any]] = {}
    runners = []
    for ip in ("127.0.0.1", "127.0.0.2"):

        async def answer(request: web.Request, ip: str = ip) -> web.Response:
            return web.json_response(bodies[ip])

        app = web.Application()
        app.router.add_get("/health", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, ip, port).start()
        runners.append(runner)
    try:
        yield port, bodies
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_sweep_reads_each_pod_and_reports_changes(
    two_pods: tuple[int, dict[str, dict[str, Any]]],
) -> None:
    port, bodies = two_pods

    def pod(name: str, ip: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "e2e", "labels": {"dap.io/workspace": "shop"}},
            "status": {"phase": "Running", "podIP": ip},
        }

    client = _Pods([pod("shop-a", "127.0.0.1"), pod("shop-b", "127.0.0.2")])
    watcher = podhealth.Watcher(port=port)
    bodies["127.0.0.1"] = health("up_to_date")
    bodies["127.0.0.2"] = health("failed", "verification failed: signature invalid")
    async with aiohttp.ClientSession() as session:
        assert await watcher.sweep(client, session) == {KEY}
        problem = watcher.problem(KEY)
        assert problem is not None and problem.reason == podhealth.VERIFICATION_FAILED
        assert problem.message == "1 of 2 pod(s), e.g. shop-b: verification failed: signature invalid"
        assert await watcher.sweep(client, session) == set()  # nothing changed: nothing nudged
        bodies["127.0.0.2"] = health("up_to_date")
        assert await watcher.sweep(client, session) == {KEY}
        assert watcher.problem(KEY) is None
        # a pod that does not answer (its port closed) judges nothing
        client.items = [pod("shop-c", "127.0.0.3")]
        assert await watcher.sweep(client, session) == set()
    assert client.selectors[0] == "app.kubernetes.io/managed-by=dap-operator,dap.io/workspace"
