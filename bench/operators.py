"""Benchmark of the operator: N Workspaces (500 by default) on a real API server and on kmock's
emulator, the figures side by side.

Run: ``.venv/bin/python bench/operators.py [--workspaces N] [--only real|emulator] [--quick]``; only
``--quick`` (5 workspaces) runs in ``make test``. The real control plane comes from ``tools/k8s``.

On each backend, in one process tree:

1. the operator runs in a *subprocess* (the real ``running.run``), so that its RSS is its own;
   on the real server it logs in with a TokenRequest token of its ServiceAccount (the RBAC of
   ``kustomize/base``), on the emulator without credentials;
2. one ClusterClass and N Workspaces are created; the time until every Workspace is ``Ready``
   is measured. "Ready" needs available replicas. The emulator has no controllers, so the
   benchmark writes every Deployment's status itself. The real server has the deployment and
   replicaset controllers but no kubelet (no container runtime here), so the benchmark plays
   only the kubelet: it marks each pod Running and Ready through ``pods/status``; the
   ReplicaSet and Deployment status, and the operator's reading of them, are the real thing;
3. API calls per workspace, split into writes, reads and watch streams: the operator's requests
   only (the emulator's own log, told apart by User-Agent; on the real server the audit log,
   by the ServiceAccount's user name);
4. the operator is restarted (a full resync: fresh caches, every resume handler runs) and the
   writes it makes on the N unchanged workspaces are counted: the target is 0;
5. the operator's RSS with N workspaces (target < 200 MiB) against the same operator with 0
   workspaces measured in the same run (the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import kmock  # noqa: E402

from tests.kube import binaries, controlplane, installing  # noqa: E402
from tests.kube.audit import WRITE_VERBS, Audit  # noqa: E402
from tests.kube.client import Api  # noqa: E402
from tests.operator.emulator import WRITE_METHODS, Emulator, declare  # noqa: E402

NS = "bench"
WITHIN = 900.0  # seconds for all workspaces to be Ready
OPERATOR = """
import asyncio, sys
from dap import logs
from dap.operator import options, running
logs.configure("error")
asyncio.run(running.run(options.Options(
    server=sys.argv[1], metrics_bind_address=sys.argv[2], health_probe_bind_address="0",
    resource_image="example.test/dap:bench", workspace_concurrency=10,
)))
"""
CLASS = {
    "apiVersion": "dap.io/v1alpha1",
    "kind": "ClusterClass",
    "metadata": {"name": "standard"},
    "spec": {"scaling": {"minReplicas": 1}},
}


@dataclasses.dataclass
class Figures:
    n: int = 0
    elapsed: float = 0.0
    calls: int = 0
    writes: int = 0
    reads: int = 0
    watches: int = 0
    resync_writes: list[str] = dataclasses.field(default_factory=list)
    resync_calls: int = 0
    rss_baseline: float = 0.0
    rss: float = 0.0
    rss_resync: float = 0.0


class Backend(Protocol):
    """One API server under the benchmark: how to write to it and to read its request record."""

    server: str  # for Options.server: "" means log in with $KUBECONFIG
    env: Mapping[str, str]

    async def create(self, path: str, body: dict[str, Any]) -> None: ...
    async def ready_count(self) -> int: ...
    async def play(self) -> None: ...  # the missing controllers or kubelet, one pass
    def mark(self) -> int: ...
    def requests(self, start: int) -> list[tuple[str, bool, bool]]: ...  # (what, write, watch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the emulator -------------------------------------------------------------------------------


class EmulatorBackend:
    def __init__(self, emulator: Emulator, server: kmock.Server) -> None:
        self.emulator = emulator
        self.client = server.client
        self.server = str(server.url).rstrip("/")
        self.env: Mapping[str, str] = {}
        self.done: set[str] = set()

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return [
            obj.raw
            for (resource, _ns, _name), obj in list(self.emulator.objects.items())
            if resource.plural == plural and not obj.deleted
        ]

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.client.post(path, json=body) as response:
            assert response.status < 300, await response.text()

    async def ready_count(self) -> int:
        return sum(1 for ws in self.objects("workspaces") if ws.get("status", {}).get("phase") == "Ready")

    async def play(self) -> None:
        """The deployment controller the emulator lacks: every Deployment reports itself available."""
        for dep in self.objects("deployments"):
            name = dep["metadata"]["name"]
            replicas = dep["spec"].get("replicas", 1)
            if name in self.done:
                continue
            status = {
                "observedGeneration": dep["metadata"].get("generation", 1),
                **dict.fromkeys(
                    ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), replicas
                ),
            }
            path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/status"
            headers = {"Content-Type": "application/merge-patch+json"}
            async with self.client.patch(path, json={"status": status}, headers=headers) as r:
                assert r.status < 300
            self.done.add(name)

    def mark(self) -> int:
        return len(self.emulator.log)

    def requests(self, start: int) -> list[tuple[str, bool, bool]]:
        return [
            (f"{r.method} {r.path}", r.method in WRITE_METHODS, r.watch)
            for r in self.emulator.log[start:]
            if not r.user_agent.startswith("kmock/")
        ]


# -- the real API server ------------------------------------------------------------------------


class RealBackend:
    def __init__(self, plane: controlplane.ControlPlane, kubeconfig: Path) -> None:
        self.api = Api(plane.url, plane.ssl_context())
        self.audit = Audit(plane.audit_log)
        self.server = ""
        self.env: Mapping[str, str] = {"KUBECONFIG": str(kubeconfig)}

    async def create(self, path: str, body: dict[str, Any]) -> None:
        await self.api.request("POST", path, body)

    async def ready_count(self) -> int:
        items = await self.api.list("workspaces", NS)
        return sum(1 for ws in items if ws.get("status", {}).get("phase") == "Ready")

    async def play(self) -> None:
        """The kubelet the control plane lacks: pods the ReplicaSets made start and turn Ready."""
        conditions = [
            {"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        for pod in await self.api.list("pods", NS):
            if pod.get("status", {}).get("phase") != "Running":
                patch = {"status": {"phase": "Running", "conditions": conditions}}
                await self.api.patch("pods", NS, pod["metadata"]["name"], patch, sub="status")

    def mark(self) -> int:
        return self.audit.mark()

    def requests(self, start: int) -> list[tuple[str, bool, bool]]:
        return [(str(c), c.verb in WRITE_VERBS, c.verb == "watch") for c in self.audit.calls(start)]


# -- the run --------------------------------------------------------------------------------------


async def start_operator(backend: Backend) -> tuple[asyncio.subprocess.Process, int]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OPERATOR,
        backend.server,
        f"127.0.0.1:{port}",
        cwd=ROOT,
        env={**os.environ, **backend.env},
        preexec_fn=controlplane.die_with_parent,  # no operator outlives an interrupted run
    )
    await until(lambda: metric(port, 'dap_reconcile_total{controller="workspace"}'), 0)
    return proc, port


async def until(read: Callable[[], Awaitable[float]], at_least: float, every: float = 0.2) -> None:
    while True:
        if await read() >= at_least:
            return
        await asyncio.sleep(every)


async def metric(port: int, name: str) -> float:
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    except aiohttp.ClientError:
        return -1
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0


async def stop_operator(proc: asyncio.subprocess.Process) -> None:
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), timeout=15)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def quiet(backend: Backend, seconds: float = 3.0) -> None:
    """Wait until the operator has made no request for ``seconds``."""
    last = -1
    while (count := len(backend.requests(0))) != last:
        last = count
        await asyncio.sleep(seconds)


async def measure(backend: Backend, n: int, label: str) -> Figures:
    figures = Figures(n=n)
    proc, port = await start_operator(backend)
    await asyncio.sleep(2)
    figures.rss_baseline = rss_mib(proc.pid)
    await stop_operator(proc)

    await backend.create("/apis/dap.io/v1alpha1/clusterclasses", CLASS)
    proc, port = await start_operator(backend)
    mark = backend.mark()
    started = time.perf_counter()
    print(f"[{label}] creating {n} workspaces…", flush=True)
    for i in range(n):
        await backend.create(
            f"/apis/dap.io/v1alpha1/namespaces/{NS}/workspaces",
            {
                "apiVersion": "dap.io/v1alpha1",
                "kind": "Workspace",
                "metadata": {"name": f"ws-{i:04d}", "namespace": NS},
                "spec": {"clusterClass": "standard"},
            },
        )
    last_report = 0.0
    while (ready := await backend.ready_count()) < n:
        await backend.play()
        if time.perf_counter() - last_report > 5:
            print(f"[{label}]   {ready}/{n} Ready after {time.perf_counter() - started:.1f}s", flush=True)
            last_report = time.perf_counter()
        if time.perf_counter() - started > WITHIN:
            raise SystemExit(f"[{label}] FAILED: not all workspaces Ready within {WITHIN:.0f} s")
        await asyncio.sleep(0.5)
    figures.elapsed = time.perf_counter() - started
    await quiet(backend)
    requests = backend.requests(mark)
    figures.calls = len(requests)
    figures.writes = sum(1 for _, write, _ in requests if write)
    figures.watches = sum(1 for _, _, watch in requests if watch)
    figures.reads = figures.calls - figures.writes - figures.watches
    figures.rss = rss_mib(proc.pid)

    await stop_operator(proc)
    mark = backend.mark()
    proc, port = await start_operator(backend)
    await until(lambda: metric(port, 'dap_reconcile_total{controller="workspace"}'), n, every=0.5)
    await quiet(backend)
    resync = backend.requests(mark)
    figures.resync_calls = len(resync)
    figures.resync_writes = [what for what, write, _ in resync if write]
    figures.rss_resync = rss_mib(proc.pid)
    await stop_operator(proc)
    return figures


async def on_emulator(n: int) -> Figures:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        return await measure(EmulatorBackend(emulator, server), n, "emulator")


async def on_real_server(n: int) -> Figures:
    started = time.perf_counter()
    directory = binaries.ensure()
    print(f"[real] binaries ready in {time.perf_counter() - started:.1f}s ({directory})", flush=True)
    with tempfile.TemporaryDirectory(prefix="dap-bench-k8s-") as tmp:
        plane = controlplane.start(directory, Path(tmp))
        try:
            print(f"[real] control plane up in {plane.startup_seconds:.1f}s at {plane.url}", flush=True)
            backend = RealBackend(plane, installing.install(plane).operator_kubeconfig)
            try:
                await backend.api.create(
                    "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
                )
                return await measure(backend, n, "real")
            finally:
                await backend.api.close()
        finally:
            plane.stop()


def report(columns: dict[str, Figures]) -> bool:
    names = list(columns)
    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("workspaces", lambda f: str(f.n)),
        ("time until all Ready", lambda f: f"{f.elapsed:.1f} s ({f.n / f.elapsed:.1f}/s)"),
        ("API calls per workspace", lambda f: f"{f.calls / f.n:.2f}"),
        ("  writes per workspace", lambda f: f"{f.writes / f.n:.2f}"),
        ("  reads per workspace", lambda f: f"{f.reads / f.n:.2f}"),
        ("  watch streams opened", lambda f: str(f.watches)),
        ("resync: write calls (target 0)", lambda f: str(len(f.resync_writes))),
        ("resync: requests in all", lambda f: str(f.resync_calls)),
        ("operator RSS, 0 workspaces", lambda f: f"{f.rss_baseline:.0f} MiB"),
        ("operator RSS, N workspaces", lambda f: f"{f.rss:.0f} MiB ({f.rss / f.rss_baseline:.2f}x)"),
        ("operator RSS after resync", lambda f: f"{f.rss_resync:.0f} MiB (target < 200)"),
    ]
    print()
    print(f"{'':32}" + "".join(f"{name:>26}" for name in names))
    for title, cell in rows:
        print(f"{title:32}" + "".join(f"{cell(columns[name]):>26}" for name in names))
    ok = True
    for name, figures in columns.items():
        for what in figures.resync_writes[:10]:
            print(f"    {name} resync write: {what}")
        ok = ok and not figures.resync_writes and figures.rss < 200 and figures.rss_resync < 200
    print("OK" if ok else "TARGET MISSED")
    return ok


async def main(n: int, only: str) -> int:
    columns: dict[str, Figures] = {}
    if only in ("", "real"):
        columns["real API server"] = await on_real_server(n)
    if only in ("", "emulator"):
        columns["kmock emulator"] = await on_emulator(n)
    return 0 if report(columns) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workspaces", type=int, default=500)
    parser.add_argument(
        "--quick", action="store_true", help="5 workspaces: prove the benchmark runs (make test)"
    )
    parser.add_argument("--only", choices=["real", "emulator"], default="")
    args = parser.parse_args()
    args.workspaces = 5 if args.quick else args.workspaces
    # SIGTERM unwinds like an interrupt, so the control plane is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(args.workspaces, args.only)))
    os._exit(130)
