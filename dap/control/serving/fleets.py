"""``dap control dev-fleet``: one region and several "clusters" on one machine.

Against any API server your kubeconfig reaches (kind, or the real control plane of the test
harness), in one process: an embedded Postgres, the region's control API (region mode, ephemeral
key) on loopback, the region control watching the management namespace ``PREFIX-mgmt``, and one
cluster control per cluster, each keeping its placements in its own namespace ``PREFIX-NAME``
(namespaces stand for clusters). The namespaces, the ClusterClass ``standard`` and the Cluster
resources (labels ``dap.io/region=dev``, ``dap.io/cluster-class=standard``) are created if
missing; the Clusters' maximum is set to the one given. Unless ``--no-operators``, it also runs
one operator per cluster namespace (``dap operator --namespace PREFIX-NAME``, a child process:
``dap.control`` may not import ``dap.operator``) in development mode: ``--dev-auto-grant-claims``
grants unsigned ResourceClaims on local Datastores at once, saying so in the claim's Ready
condition and in an ``audit: dev_auto_grant`` log line. The children are stopped with the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp
from aiohttp import web

from dap import embedded, kube, listening
from dap.control.clusters import routing
from dap.control.kube import member, region
from dap.control.serving import app as control_app
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.trust import signing

log = logging.getLogger(__name__)
REGION = "dev"
CLASS = "standard"


class NoCrdsError(Exception):
    """The API server does not know dap's kinds."""


def parse_clusters(text: str) -> dict[str, int]:
    """``a=2,b=2`` -> {"a": 2, "b": 2} (name = maximum of workspaces)."""
    found: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, maximum = item.partition("=")
        if not sep or not name or not maximum.isdigit():
            raise ValueError(f"{item!r} is not NAME=MAX (e.g. a=2)")
        found[name] = int(maximum)
    if not found:
        raise ValueError("name at least one cluster, e.g. --clusters a=2,b=2")
    return found


async def _ensure(client: kube.Client, resource: kube.Resource, body: Mapping[str, object]) -> None:
    with contextlib.suppress(kube.ConflictError):
        await client.create(resource, None, body)


async def prepare(client: kube.Client, prefix: str, clusters: Mapping[str, int]) -> None:
    for name in ["mgmt", *clusters]:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{prefix}-{name}"}}
        await _ensure(client, kube.NAMESPACES, namespace)
    cluster_class = {"apiVersion": "dap.io/v1alpha1", "kind": "ClusterClass", "metadata": {"name": CLASS}}
    try:
        await _ensure(client, kube.CLUSTER_CLASSES, {**cluster_class, "spec": {}})
    except kube.NotFoundError as exc:
        raise NoCrdsError(
            "dap's CRDs are not installed in this API server: apply them first "
            "(kubectl apply -k kustomize/overlays/kind, or kustomize/management)"
        ) from exc
    for name, maximum in clusters.items():
        cluster = f"{prefix}-{name}"
        labels = {routing.REGION_LABEL: REGION, routing.CLASS_LABEL: CLASS}
        spec = {"maxWorkspaces": maximum, "state": "active"}
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": cluster, "labels": labels},
        }
        await _ensure(client, kube.CLUSTERS, {**body, "spec": spec})
        await client.patch(kube.CLUSTERS, None, cluster, {"metadata": {"labels": labels}, "spec": spec})


def operator_command(namespace: str, log_level: str) -> list[str]:
    """The argv of the dev-mode operator of one cluster namespace, run by this very interpreter."""
    return [
        sys.executable,
        "-c",
        "import sys; from dap.cli import main; sys.exit(main())",
        *("operator", "--namespace", namespace, "--cluster-name", namespace, "--dev-auto-grant-claims"),
        *("--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-level", log_level),
    ]


async def start_operators(
    kubeconfig: str, namespaces: Sequence[str], log_level: str
) -> list[asyncio.subprocess.Process]:
    """One operator per namespace, logged in with ``kubeconfig``; their logs go to ours."""
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    started = []
    for namespace in namespaces:
        started.append(await asyncio.create_subprocess_exec(*operator_command(namespace, log_level), env=env))
        log.info("dev operator for namespace %s started (--dev-auto-grant-claims)", namespace)
    return started


STOP_GRACE = 20.0  # seconds an operator gets to stop after SIGINT


async def stop_operators(processes: Sequence[asyncio.subprocess.Process]) -> None:
    """SIGINT (kopf stops gracefully), then SIGKILL whatever still runs after ``STOP_GRACE``."""
    for process in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def run(
    kubeconfig: str,
    clusters: Mapping[str, int],
    prefix: str,
    port: int,
    data_dir: Path,
    *,
    operators: bool = True,
    log_level: str = "info",
) -> None:
    dsn, handle = await asyncio.to_thread(embedded.start, data_dir)
    client = kube.Client.connect(kube.login(kubeconfig=kubeconfig))
    pool = await store.connect(dsn, max_size=4)
    runner = web.AppRunner(
        control_app.build_app(
            config=settings.Settings(mode="region"), pool=pool, signer=signing.Signer.generate()
        ),
        access_log=None,
    )
    children: list[asyncio.subprocess.Process] = []
    try:
        await prepare(client, prefix, clusters)
        if operators:
            children = await start_operators(kubeconfig, [f"{prefix}-{name}" for name in clusters], log_level)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await listening.start(site, "the region's control API, --port", listening.address("127.0.0.1", port))
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            tasks: list[asyncio.Task[object]] = [
                asyncio.create_task(
                    member.Member(
                        member.Options(url, f"{prefix}-{name}", namespace=f"{prefix}-{name}", interval=1.0),
                        client,
                        session,
                    ).run()
                )
                for name in clusters
            ]
            options = region.Options(dsn=dsn, namespace=f"{prefix}-mgmt", interval=1.0, kubeconfig=kubeconfig)
            # kopf takes over SIGINT/SIGTERM and stops the region control gracefully; a stop flag
            # (rather than cancelling it) also keeps kopf from arming its last-resort SIGKILL.
            stop = asyncio.Event()
            control = asyncio.create_task(region.run(options, stop_flag=stop))
            print(
                f"dev fleet: region {url}, management namespace {prefix}-mgmt, clusters "
                + ", ".join(f"{prefix}-{n} (max {m})" for n, m in clusters.items())
                + f"\n  kubectl apply -n {prefix}-mgmt a Workspace with spec region: {REGION}, "
                f"clusterClass: {CLASS}; kubectl get dws -A; kubectl get dcl"
                + (
                    "\n  operators (dev mode) in "
                    + ", ".join(f"{prefix}-{n}" for n in clusters)
                    + ": unsigned ResourceClaims on local (sqlite, memory, fs) Datastores are auto-granted"
                    if children
                    else ""
                ),
                flush=True,
            )
            try:
                await asyncio.shield(control)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await control
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await stop_operators(children)
        await runner.cleanup()
        await pool.close()
        await client.close()
        await asyncio.to_thread(embedded.stop, handle, data_dir)
