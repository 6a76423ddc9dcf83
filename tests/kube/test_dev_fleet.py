"""``dap control dev-fleet`` and ``dap dev --fleet`` on the real API server: one region, two
namespace "clusters", in one process started as a user would; workspaces routed, and moved when a
cluster's room shrinks. Also: ``dap dev --fleet`` without an API server, and an API server
without dap's CRDs, refused with what to do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from dap import kube
from dap.control.serving import fleets as control_devfleet
from dap.dev import fleet as devfleet
from dap.operator import claims
from dap.resource_pod import errors
from tests.kube import controlplane, loopback, objects
from tests.kube.client import Api, wait_for
from tests.kube.conftest import Cluster

DAP = Path(sys.executable).parent / "dap"


def _control_dev_fleet(kubeconfig: Path, port: int, data: Path) -> tuple[str, list[str], Path]:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    argv = [
        *(str(DAP), "control", "dev-fleet", "--kubeconfig", str(kubeconfig), "--clusters", "a=2,b=2"),
        *("--prefix", prefix, "--port", str(port), "--data-dir", str(data / "pg"), "--log-level", "info"),
        "--no-operators",  # the dap-dev-fleet case runs them (and checks their dev mode)
    ]
    return prefix, argv, data / "pg"


def _dap_dev_fleet(kubeconfig: Path, port: int, data: Path) -> tuple[str, list[str], Path]:
    argv = [
        *(str(DAP), "dev", "--fleet", "--kubeconfig", str(kubeconfig), "--fleet-clusters", "a=2,b=2"),
        *("--control-port", str(port), "--data-dir", str(data), "--log-level", "info"),
    ]
    return devfleet.PREFIX, argv, data / "fleet-pg"


@pytest.fixture(
    params=[
        pytest.param(_control_dev_fleet, id="dap-control-dev-fleet"),
        pytest.param(_dap_dev_fleet, id="dap-dev-fleet"),
    ]
)
async def fleet_process(
    request: pytest.FixtureRequest, cluster: Cluster, api: Api, tmp_path: Path
) -> AsyncIterator[tuple[str, subprocess.Popen[str]]]:
    launch: Callable[[Path, int, Path], tuple[str, list[str], Path]] = request.param
    prefix, argv, pg = launch(cluster.plane.admin_kubeconfig, controlplane.free_port(), tmp_path)
    log = (tmp_path / "fleet.log").open("w")
    process = subprocess.Popen(  # noqa: ASYNC220 - started once; our own CLI, our arguments
        argv,
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
        assert not (pg / "postmaster.pid").exists(), output[-3000:]
        for name in ("mgmt", "a", "b"):
            await api.delete("namespaces", None, f"{prefix}-{name}", missing_ok=True)
        for name in ("a", "b"):
            await api.delete("clusters", None, f"{prefix}-{name}", missing_ok=True)


async def test_dev_fleet_routes_and_moves_workspaces(
    api: Api, fleet_process: tuple[str, subprocess.Popen[str]]
) -> None:
    prefix, process = fleet_process
    mgmt, a, b = f"{prefix}-mgmt", f"{prefix}-a", f"{prefix}-b"

    async def known(cluster: str) -> str | None:
        # The region writes a Cluster's status once it has recorded it: before that, a workspace
        # would be routed as if the cluster did not exist (both onto the other, sticky after).
        body = await api.get("clusters", None, cluster) or {}
        phase: str | None = (body.get("status") or {}).get("phase")
        return phase

    for cluster in (a, b):
        await wait_for(lambda c=cluster: known(c), within=60, what=f"the region knowing Cluster {cluster}")
    if prefix == devfleet.PREFIX:
        await _an_unsigned_claim_on_a_local_datastore_is_auto_granted(api, a)

    async def host(name: str) -> str | None:
        """The cluster a management Workspace is bound to, once it exists there too."""
        assert process.poll() is None, "dev-fleet exited"
        body = await api.get("workspaces", mgmt, name) or {}
        cluster: str | None = (body.get("status") or {}).get("cluster")
        return cluster if cluster and await api.get("workspaces", cluster, name) else None

    for name in ("one", "two"):
        spec = {"region": "dev", "clusterClass": "standard"}
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": mgmt},
        }
        await api.create("workspaces", {**body, "spec": spec})
    # Which lands first is up to the watch (kopf handles objects concurrently); equal room means
    # the second goes to the emptier cluster, so they are spread over both.
    one = await wait_for(lambda: host("one"), within=120, what="one placed")
    two = await wait_for(lambda: host("two"), within=120, what="two placed")
    assert {one, two} == {a, b}

    await api.patch("clusters", None, one, {"spec": {"maxWorkspaces": 0}})

    async def moved() -> bool:
        return await host("one") == two

    await wait_for(moved, within=120, what=f"one moved from {one} to {two}")

    # Handed over, not cut over: the cluster left keeps it until the new one runs it (Ready, or
    # Idle when the dev class scales it to zero; pods are played Running where there are any).
    assert await api.get("workspaces", one, "one") is not None

    async def settled() -> bool:
        if prefix != devfleet.PREFIX:  # --no-operators: the test writes what an operator would
            await api.patch("workspaces", two, "one", {"status": {"phase": "Ready"}}, sub="status")
        await objects.run_pods(api, two, "one")
        body = await api.get("workspaces", two, "one") or {}
        return (body.get("status") or {}).get("phase") in ("Ready", "Idle")

    await wait_for(settled, within=90, what=f"one settled in {two}")

    async def left() -> bool:
        return await api.get("workspaces", one, "one") is None

    await wait_for(left, within=60, what=f"one removed from {one}")


async def _an_unsigned_claim_on_a_local_datastore_is_auto_granted(api: Api, ns: str) -> None:
    """``dap dev --fleet`` runs each cluster namespace's operator with --dev-auto-grant-claims."""
    await api.create("secrets", objects.secret(ns, name="files-endpoint", path="/data/files.db"))
    store = objects.datastore(ns)
    store["metadata"]["name"] = "files"
    store["spec"].update(driver="sqlite", endpointSecretRef={"name": "files-endpoint"})
    await api.create("datastores", store)
    body = objects.claim(ns, name="shop-files")
    body["spec"]["datastore"] = "files"
    del body["spec"]["signature"]
    await api.create("resourceclaims", body)

    async def reason() -> str | None:
        found = await objects.condition(api, "resourceclaims", ns, "shop-files", "Ready")
        return found["reason"] if found and found["status"] == "True" else None

    assert await wait_for(reason, within=90, what="the claim auto-granted") == claims.AUTO_GRANTED


def test_dev_fleet_kubeconfig_is_the_given_one_else_the_first_of_kubeconfig(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    two.write_text("{}")
    assert devfleet.kubeconfig(two, {}) == two
    assert devfleet.kubeconfig(None, {"KUBECONFIG": f"{one}{os.pathsep}{two}"}) == two
    with pytest.raises(errors.ConfigError, match="needs a Kubernetes API server"):
        devfleet.kubeconfig(None, {})
    with pytest.raises(errors.ConfigError, match=f"--kubeconfig {one}: no such file"):
        devfleet.kubeconfig(one, {"KUBECONFIG": str(two)})


def test_dev_fleet_command_runs_control_dev_fleet(tmp_path: Path) -> None:
    argv = devfleet.command(tmp_path / "k", "a=1", port=9000, data_dir=tmp_path, log_level="info")
    assert argv[0] == sys.executable
    assert argv[3:] == [
        *("control", "dev-fleet", "--kubeconfig", str(tmp_path / "k"), "--clusters", "a=1"),
        *(
            "--prefix",
            "dev",
            "--port",
            "9000",
            "--data-dir",
            str(tmp_path / "fleet-pg"),
            "--log-level",
            "info",
        ),
    ]


def test_dap_dev_fleet_without_an_api_server_says_what_to_do(tmp_path: Path) -> None:
    """Run where there is no examples/ directory: --fleet needs no --spec; plain dap dev still does."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    def dap_dev(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(DAP), "dev", *args, "--data-dir", str(tmp_path / "data")]
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False
        )

    done = dap_dev("--fleet")
    assert done.returncode == 2, done.stderr
    assert "needs a Kubernetes API server" in done.stderr and "--kubeconfig" in done.stderr
    plain = dap_dev()
    assert plain.returncode == 2, plain.stderr
    assert "Invalid value for '--spec': Directory 'examples/procurement' does not exist." in plain.stderr
    assert not (tmp_path / "data").exists()


async def test_an_api_server_without_dap_crds_is_refused_clearly() -> None:
    """A real HTTP server playing an API server that knows namespaces but not dap's kinds."""

    async def namespaces(request: web.Request) -> web.Response:
        return web.json_response(await request.json(), status=201)

    async def unknown(request: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "Status", "code": 404, "message": "the server could not find"}, status=404
        )

    app = web.Application()
    app.router.add_post("/api/v1/namespaces", namespaces)
    app.router.add_post("/apis/dap.io/v1alpha1/{plural}", unknown)
    async with loopback.serving(app) as url:
        client = kube.Client.connect(kube.login(server=url))
        try:
            with pytest.raises(
                control_devfleet.NoCrdsError, match="kubectl apply -k kustomize/overlays/kind"
            ):
                await control_devfleet.prepare(client, "x", {"a": 1})
        finally:
            await client.close()


def test_dev_fleet_operators_run_in_dev_mode_with_their_ports_off() -> None:
    argv = control_devfleet.operator_command("dev-a", "debug")
    assert argv[0] == sys.executable
    assert argv[3:] == [
        *("operator", "--namespace", "dev-a", "--cluster-name", "dev-a", "--dev-auto-grant-claims"),
        *("--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-level", "debug"),
    ]
