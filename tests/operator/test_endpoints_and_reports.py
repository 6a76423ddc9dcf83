"""Probes, metrics, and the reports to a real (small, recording) control plane on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from typing import Any

import aiohttp
import pytest

from dap import listening
from dap.operator import options as operator_options
from dap.operator import probes, reporting, trusting
from tests.operator.conftest import Api, Control, StartOperator, wait_for

NS = "tenants"
KEY_A, KEY_B = "a" * 64, "b" * 64


def workspace(name: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NS},
        "spec": {},
    }


async def roll_out(api: Api, name: str) -> None:
    status = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    await api.patch("deployments", NS, name, {"status": status}, sub="status")


async def get(port: int | None, path: str) -> tuple[int, str]:
    assert port is not None
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_probes_and_metrics(api: Api, start_operator: StartOperator) -> None:
    runtime = await start_operator()
    settings = runtime.kopf_settings
    assert settings is not None
    # A silent watch is cut by the client and re-established (server ends it first, normally).
    assert settings.watching.server_timeout == 300
    assert settings.watching.client_timeout == 330
    assert settings.peering.standalone is True
    assert await get(runtime.probe_port, "/healthz") == (200, "ok\n")
    assert await get(runtime.probe_port, "/readyz") == (200, "ok\n")
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    await wait_for(lambda: (api.get("workspaces", NS, "shop") or {}).get("status"))

    status, text = await get(runtime.metrics_port, "/metrics")
    assert status == 200
    lines = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"
    }
    assert lines['dap_reconcile_total{controller="workspace"}'] >= 1
    assert 'dap_reconcile_errors_total{controller="workspace"}' in lines
    assert lines['dap_workqueue_depth{controller="workspace"}'] >= 0
    assert lines['dap_kube_requests_total{code="2xx",verb="create"}'] >= 3  # Deployment, Service, ConfigMap


async def test_readyz_is_503_until_the_operator_can_reconcile() -> None:
    ready = False
    served = await probes.serve(probes.probe_app(lambda: ready), "127.0.0.1:0")
    assert served is not None
    runner, port = served
    try:
        assert (await get(port, "/readyz"))[0] == 503
        ready = True
        assert (await get(port, "/readyz"))[0] == 200
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param(":8081", ("0.0.0.0", 8081), id="port-only"),
        pytest.param("127.0.0.1:9", ("127.0.0.1", 9), id="host-port"),
        pytest.param("", None, id="empty-off"),
        pytest.param("0", None, id="zero-off"),
    ],
)
def test_parse_bind(address: str, expected: tuple[str, int] | None) -> None:
    assert probes.parse_bind(address) == expected


def test_parse_bind_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="host"):
        probes.parse_bind("localhost")


async def test_reports_node_health_and_workspace_status_changes(
    api: Api, control: Control, start_operator: StartOperator
) -> None:
    control.keys = [KEY_B, KEY_A, "not-a-key"]
    await start_operator(control_cluster_url=control.url, report_interval=0.2, cluster_name="kind-1")
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    await wait_for(
        lambda: any(r["phase"] == "Progressing" for r in control.workspace_status), what="Progressing"
    )
    await roll_out(api, "dap-shop")
    await wait_for(lambda: any(r["phase"] == "Ready" for r in control.workspace_status), what="Ready report")
    await wait_for(lambda: len(control.node_health) >= 2, what="two node-health reports")
    # A report sent while the first reconcile ran may still count 0 workspaces: wait for the next.
    await wait_for(lambda: control.node_health[-1]["workspaces"] == 1, what="a report counting the workspace")

    report = control.workspace_status[-1]
    assert set(report) == {"cluster", "workspace", "phase", "conditions", "at"}
    assert (report["cluster"], report["workspace"]) == ("kind-1", "shop")
    assert {c["type"] for c in report["conditions"]} == {"Ready", "Progressing", "Degraded"}
    # On change only: one report per distinct status, not one per reconcile.
    phases = [r["phase"] for r in control.workspace_status]
    assert phases.count("Ready") == 1

    # the report the wait saw (reports keep coming every 0.2 s while the test reads them)
    health = next(h for h in reversed(control.node_health) if h["workspaces"] == 1)
    assert set(health) == {"cluster", "node", "status", "workspaces", "cpu", "memory", "at"}
    assert health["status"] == "healthy"
    assert health["workspaces"] == 1
    assert 0 <= health["memory"] <= 1

    # Trusted keys from GET /v1/keys end up in the workspace's ConfigMap, valid ones only.
    config = api.get("configmaps", NS, "dap-shop")
    assert config is not None
    assert config["data"]["DAP_TRUSTED_KEYS"] == f"{KEY_A},{KEY_B}"


async def test_failing_control_plane_never_blocks_reconciling(
    api: Api, control: Control, start_operator: StartOperator
) -> None:
    control.fail = True
    runtime = await start_operator(control_cluster_url=control.url, report_interval=0.1)
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"), what="reconciled despite failing reports")
    await wait_for(
        lambda: runtime.metrics.reports_total.labels("/v1/node-health", "failure")._value.get() >= 2,
        what="failed reports counted",
    )
    control.fail = False
    await wait_for(lambda: control.workspace_status, what="status report delivered after recovery")


async def test_keys_unavailable_at_start_are_fetched_again_soon(
    api: Api, control: Control, start_operator: StartOperator
) -> None:
    """A control plane that comes up after the operator hands out its keys within seconds, not
    after the 60 s refresh interval (a fresh cluster's pods wait for them to serve)."""
    control.fail = True
    await start_operator(control_cluster_url=control.url, report_interval=0.2)
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("configmaps", NS, "dap-shop"), what="the workspace's ConfigMap")
    control.keys = [KEY_A]
    control.fail = False

    def trusted() -> str | None:
        config = api.get("configmaps", NS, "dap-shop") or {}
        return config.get("data", {}).get("DAP_TRUSTED_KEYS")

    await wait_for(
        lambda: trusted() == KEY_A,
        within=10,
        what="the keys in the ConfigMap once the control plane answers",
    )


def test_failures_are_logged_at_most_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = reporting._LogLimiter(every=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="dap.operator.reporting"):
        for _ in range(5):
            limiter.warn("/v1/node-health", "down")
        now[0] = 61
        limiter.warn("/v1/node-health", "down")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["down", "down (4 similar failures not logged)"]


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        pytest.param({}, "healthy", id="empty"),
        pytest.param({"a": "Ready", "b": "Idle"}, "healthy", id="ready"),
        pytest.param({"a": "Ready", "b": "Degraded"}, "degraded", id="degraded"),
        pytest.param({"a": "Failed"}, "degraded", id="failed"),
    ],
)
def test_node_status(phases: dict[str, str], expected: str) -> None:
    assert reporting.node_status(phases) == expected


def test_proc_parsers() -> None:
    assert reporting.cpu_load("1.50 0.5 0.2 1/100 42", 2) == 0.75
    assert reporting.memory_used("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 250 kB\n") == 0.75
    assert reporting.memory_used("") == 0.0


@pytest.mark.parametrize(
    ("body", "keys"),
    [
        pytest.param({"keys": [KEY_B, KEY_A]}, (KEY_A, KEY_B), id="strings"),
        pytest.param({"keys": [{"public_key": KEY_A.upper()}]}, (KEY_A,), id="objects"),
        pytest.param({"keys": ["short", 3, None]}, (), id="invalid-dropped"),
        pytest.param(["not", "an", "object"], (), id="wrong-shape"),
    ],
)
def test_parse_keys(body: Any, keys: tuple[str, ...]) -> None:
    assert trusting.parse_keys(body) == keys


async def test_without_a_resource_image_the_pods_run_the_operators_own(
    api: Api, start_operator: StartOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 41: --resource-image was an argument in the base manifests, which kustomize's
    # images: cannot rewrite; the operator's own image (which images: does rewrite) is used now.
    image = "registry.test/dap@sha256:" + "c" * 64
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dap-operator-abc", "namespace": "dap-system"},
        "spec": {"containers": [{"name": "operator", "image": image}]},
    }
    await api.create("pods", pod)
    monkeypatch.setenv("POD_NAME", "dap-operator-abc")
    monkeypatch.setenv("POD_NAMESPACE", "dap-system")
    await start_operator(resource_image=operator_options.default_resource_image(os.environ))
    await api.create("workspaces", workspace())
    deployment = await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_the_operators_own_image_is_its_named_or_only_container() -> None:
    def pod(*containers: tuple[str, str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": n, "image": i} for n, i in containers]}}

    assert operator_options.own_image(pod(("operator", "a:1"), ("proxy", "b:1"))) == "a:1"
    assert operator_options.own_image(pod(("main", "a:2"))) == "a:2"
    assert operator_options.own_image(pod(("x", "a"), ("y", "b"))) is None
    assert operator_options.default_resource_image({}) == operator_options.DEFAULT_RESOURCE_IMAGE
    in_pod = {"POD_NAME": "p", "POD_NAMESPACE": "n"}
    assert operator_options.default_resource_image(in_pod) == operator_options.SAME_IMAGE


@pytest.mark.parametrize("option", ["health_probe_bind_address", "metrics_bind_address"])
async def test_a_taken_probe_or_metrics_port_ends_the_operator_naming_it(
    api: Api, start_operator: StartOperator, option: str
) -> None:
    """Issue 40 row 18: kopf retried the start-up handler for ever behind a taken port."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        options = operator_options.Options(
            server=api.url,
            **{"health_probe_bind_address": "127.0.0.1:0", "metrics_bind_address": "127.0.0.1:0"},
            resource_image="example.test/dap:1.0",
        )
        _, task = start_operator.start(dataclasses.replace(options, **{option: f"127.0.0.1:{port}"}))
        with pytest.raises(listening.ListenError) as ended:
            await asyncio.wait_for(task, timeout=20)
        start_operator.tasks.remove(task)  # ended, as it should: nothing left to stop
    said = str(ended.value)
    assert f"cannot listen on 127.0.0.1:{port}" in said, said
