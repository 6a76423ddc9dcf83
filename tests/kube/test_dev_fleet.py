"""``dap control dev-fleet`` on the real API server: one region, two namespace "clusters", in one
process started as a user would; workspaces routed, and moved when a cluster's room shrinks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube import controlplane
from tests.kube.client import Api, wait_for
from tests.kube.conftest import Cluster

DAP = Path(sys.executable).parent / "dap"


@pytest.fixture
async def fleet_process(
    cluster: Cluster, api: Api, tmp_path: Path
) -> AsyncIterator[tuple[str, subprocess.Popen[str]]]:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    log = (tmp_path / "fleet.log").open("w")
    process = subprocess.Popen(  # noqa: ASYNC220 - started once; our own CLI, our arguments
        [
            str(DAP),
            "control",
            "dev-fleet",
            "--kubeconfig",
            str(cluster.plane.admin_kubeconfig),
            "--clusters",
            "a=2,b=2",
            "--prefix",
            prefix,
            "--port",
            str(controlplane.free_port()),
            "--data-dir",
            str(tmp_path / "pg"),
            "--log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "KUBECONFIG": str(cluster.plane.admin_kubeconfig)},
    )
    try:
        yield prefix, process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        output = (tmp_path / "fleet.log").read_text()
        print(output[-5000:])  # shown when the test fails
        # Ctrl-C stops everything it started, its embedded Postgres included.
        assert process.returncode == 0, output[-3000:]
        assert not (tmp_path / "pg" / "postmaster.pid").exists(), output[-3000:]
        for name in ("mgmt", "a", "b"):
            await api.delete("namespaces", None, f"{prefix}-{name}", missing_ok=True)
        for name in ("a", "b"):
            await api.delete("clusters", None, f"{prefix}-{name}", missing_ok=True)


async def test_dev_fleet_routes_and_moves_workspaces(
    api: Api, fleet_process: tuple[str, subprocess.Popen[str]]
) -> None:
    prefix, process = fleet_process
    mgmt, a, b = f"{prefix}-mgmt", f"{prefix}-a", f"{prefix}-b"
    await wait_for(lambda: api.get("clusters", None, b), within=60, what="the dev fleet's Clusters")

    async def placed(name: str, cluster: str) -> dict[str, Any] | None:
        assert process.poll() is None, "dev-fleet exited"
        body = await api.get("workspaces", mgmt, name) or {}
        on = (body.get("status") or {}).get("cluster") == cluster
        return await api.get("workspaces", cluster, name) if on else None

    for name in ("one", "two"):
        spec = {"region": "dev", "clusterClass": "standard"}
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": mgmt},
        }
        await api.create("workspaces", {**body, "spec": spec})
    await wait_for(lambda: placed("one", a), within=120, what="one on a")
    await wait_for(lambda: placed("two", b), within=120, what="two on b (equal load: the emptier)")

    await api.patch("clusters", None, a, {"spec": {"maxWorkspaces": 0}})
    await wait_for(lambda: placed("one", b), within=120, what="one moved to b")

    async def left_a() -> bool:
        return await api.get("workspaces", a, "one") is None

    await wait_for(left_a, within=30, what="one removed from a")
