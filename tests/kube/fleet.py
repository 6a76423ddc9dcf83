"""One region and its member clusters on the real API server, for the placement tests.

Two namespaces on the one test API server stand for two workload clusters (a second API server
would cost another 10-30 s of start-up on two shared cores); the test's own namespace is the
management cluster's. Every part is the real one: the region's HTTP control (region mode) on
loopback over a fresh Postgres database, the region control (kopf) logged in as the
``dap-region-control`` ServiceAccount, one cluster control per member cluster logged in as
``dap-cluster-control``, and one operator per member namespace as ``dap-operator``. The RBAC of
``kustomize/components/*`` is what the controls may do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from dap import kube
from dap.control.clusters.routing import CLASS_LABEL, REGION_LABEL
from dap.control.kube import member, region
from dap.control.serving import app as control_app
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.trust import signing
from tests.kube import controlplane, installing
from tests.kube.client import Api, wait_for

COMPONENTS = installing.ROOT / "kustomize" / "components"
REGION_USER = "system:serviceaccount:dap-system:dap-region-control"
MEMBER_USER = "system:serviceaccount:dap-system:dap-cluster-control"
INTERVAL = 0.3  # seconds between passes and pulls: the tests wait for convergence, not for timers


@dataclasses.dataclass(frozen=True)
class Accounts:
    region: Path
    member: Path


def install_controls(plane: controlplane.ControlPlane) -> Accounts:
    """Apply the controls' RBAC (and Deployments, which stay Pending) and log their accounts in."""
    paths = []
    for component, account in (
        ("region-control", "dap-region-control"),
        ("cluster-control", "dap-cluster-control"),
    ):
        installing.kubectl(plane, "apply", "-k", str(COMPONENTS / component))
        token = installing.kubectl(
            plane, "create", "token", account, "-n", "dap-system", "--duration=24h"
        ).stdout.strip()
        path = plane.directory / f"{account}.kubeconfig"
        path.write_text(
            yaml.safe_dump(controlplane.kubeconfig(plane.url, plane.pki.ca.cert, user={"token": token}))
        )
        paths.append(path)
    return Accounts(*paths)


class RegionApi:
    """The region's HTTP control on a fixed loopback port, so it can go down and come back."""

    def __init__(self, pool: store.Pool) -> None:
        self.pool = pool
        self.port = controlplane.free_port()
        self.signer = signing.Signer.generate()
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = control_app.build_app(
            config=settings.Settings(mode="region"), pool=self.pool, signer=self.signer
        )
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


class RegionThread:
    """The region control in a thread of its own with its own event loop.

    kopf, when it stops, cancels every task of its loop created after it started (it cannot
    tell its own from others'); in the test's loop that would be the fixtures' teardown.
    """

    def __init__(self, control: region.Region) -> None:
        self.control = control
        self.flag = threading.Event()
        self.thread = threading.Thread(target=self._main, name="region-control", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        try:
            asyncio.run(region.run(self.control.options, stop_flag=self.flag, region=self.control))
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.flag.set()
        self.thread.join(timeout=30)
        if self.thread.is_alive():
            raise AssertionError("the region control did not stop within 30 s")


@dataclasses.dataclass
class Fleet:
    api: Api
    management: str  # the management cluster's namespace
    accounts: Accounts
    region_api: RegionApi
    region: region.Region
    region_thread: RegionThread
    members: dict[str, member.Member] = dataclasses.field(default_factory=dict)
    tasks: list[asyncio.Task[Any]] = dataclasses.field(default_factory=list)
    sessions: list[aiohttp.ClientSession] = dataclasses.field(default_factory=list)
    clients: list[kube.Client] = dataclasses.field(default_factory=list)
    clusters: list[str] = dataclasses.field(default_factory=list)
    running: dict[int, asyncio.Task[Any]] = dataclasses.field(default_factory=dict)

    def name(self, short: str) -> str:
        """The cluster (and member namespace) name of ``short`` in this test."""
        return f"{self.management}-{short}"

    async def add_cluster(
        self, short: str, *, max_workspaces: int = 10, load: float = 0.0, state: str = "active"
    ) -> str:
        name = self.name(short)
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "labels": {REGION_LABEL: "eu", CLASS_LABEL: "standard"}},
            "spec": {"maxWorkspaces": max_workspaces, "load": load, "state": state},
        }
        await self.api.create("clusters", body)
        self.clusters.append(name)
        return name

    async def start_member(self, short: str, **overrides: Any) -> member.Member:
        name = self.name(short)
        options = member.Options(
            region_url=self.region_api.url,
            cluster=name,
            namespace=name,
            interval=INTERVAL,
            kubeconfig=str(self.accounts.member),
            **overrides,
        )
        client = kube.Client.connect(kube.from_kubeconfig(options.kubeconfig))
        session = aiohttp.ClientSession()
        self.clients.append(client)
        self.sessions.append(session)
        control = member.Member(options, client, session)
        self.members[name] = control
        task = asyncio.create_task(control.run())
        self.tasks.append(task)
        self.running[id(control)] = task
        return control

    async def stop_member(self, control: member.Member) -> None:
        """Stop one cluster control as a replica going away would (it releases its Lease)."""
        task = self.running.pop(id(control))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def workspace(self, name: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": self.management},
            "spec": {"region": "eu", "clusterClass": "standard", **spec},
        }
        return await self.api.create("workspaces", body)

    async def status(self, name: str) -> dict[str, Any]:
        body = await self.api.get("workspaces", self.management, name) or {}
        found: dict[str, Any] = body.get("status") or {}
        return found

    async def placed_on(self, name: str, cluster: str | None, within: float = 30) -> dict[str, Any]:
        """Wait until the management Workspace's status names ``cluster``; return that status."""

        async def probe() -> dict[str, Any] | None:
            status = await self.status(name)
            scheduled: dict[str, Any] = next(
                (c for c in status.get("conditions", []) if c["type"] == "Scheduled"), {}
            )
            wanted = "True" if cluster else "False"
            ok = status.get("cluster") == cluster and scheduled.get("status") == wanted
            return status if ok else None

        return await wait_for(probe, within=within, what=f"workspace {name} placed on {cluster}")

    async def materialised(self, name: str, cluster: str, within: float = 30) -> dict[str, Any]:
        return await wait_for(
            lambda: self.api.get("workspaces", cluster, name),
            within=within,
            what=f"workspace {name} in cluster {cluster}",
        )

    async def gone(self, name: str, cluster: str, within: float = 30) -> None:
        async def probe() -> bool:
            return await self.api.get("workspaces", cluster, name) is None

        await wait_for(probe, within=within, what=f"workspace {name} removed from {cluster}")

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=10)
        await asyncio.to_thread(self.region_thread.stop)
        for session in self.sessions:
            await session.close()
        for client in self.clients:
            await client.close()
        await self.region_api.stop()
        for name in self.clusters:
            await self.api.delete("clusters", None, name, missing_ok=True)
