"""Benchmark of the operator: 500 Workspaces on kmock's Kubernetes emulator.

Run: ``.venv/bin/python bench/operator.py [--workspaces N]``. Not part of the test suite.

What it does, in one process tree:

1. starts kmock's emulator (this process) and the operator in a *subprocess* (the real
   ``running.run``; a subprocess so that its RSS is the operator's alone);
2. creates one ClusterClass and N Workspaces, and plays the deployment controller (the emulator
   has none): every Deployment the operator creates gets a status with its replicas available;
3. prints the time until every Workspace is ``Ready`` and the API calls per workspace, split
   into reads and writes (the operator's requests only, told apart by User-Agent; watch streams
   counted once each);
4. restarts the operator (a full resync: fresh caches, every resume handler runs) and counts the
   write calls it makes on the N unchanged workspaces: the target is 0;
5. prints the operator's RSS with N workspaces (target < 200 MiB), as a ratio to the RSS of the
   same operator with 0 workspaces measured in the same run (the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import kmock  # noqa: E402

from tests.operator.emulator import WRITE_METHODS, Emulator, Logged, declare  # noqa: E402

NS = "bench"
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Bench:
    def __init__(self, emulator: Emulator, server: kmock.Server) -> None:
        self.emulator = emulator
        self.server = server
        self.url = str(server.url).rstrip("/")

    def operator_requests(self, start: int = 0) -> list[Logged]:
        return [r for r in self.emulator.log[start:] if not r.user_agent.startswith("kmock/")]

    def mark(self) -> int:
        return len(self.emulator.log)

    def objects(self, plural: str) -> list[dict[str, Any]]:
        out = []
        for (resource, _ns, _name), obj in list(self.emulator.objects.items()):
            if resource.plural == plural and not obj.deleted:
                out.append(obj.raw)
        return out

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.server.client.post(path, json=body) as response:
            assert response.status < 300, await response.text()

    async def play_deployment_controller(self, stop: asyncio.Event) -> None:
        done: set[str] = set()
        while not stop.is_set():
            for dep in self.objects("deployments"):
                name = dep["metadata"]["name"]
                replicas = dep["spec"].get("replicas", 1)
                if name in done or dep.get("status", {}).get("availableReplicas") == replicas:
                    continue
                status = {
                    "observedGeneration": dep["metadata"].get("generation", 1),
                    "replicas": replicas,
                    "updatedReplicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                }
                path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/status"
                headers = {"Content-Type": "application/merge-patch+json"}
                async with self.server.client.patch(path, json={"status": status}, headers=headers) as r:
                    assert r.status < 300
                done.add(name)
            await asyncio.sleep(0.2)

    def ready_count(self) -> int:
        return sum(1 for ws in self.objects("workspaces") if ws.get("status", {}).get("phase") == "Ready")


async def start_operator(url: str) -> tuple[asyncio.subprocess.Process, int]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OPERATOR, url, f"127.0.0.1:{port}", cwd=ROOT
    )
    await until(lambda: metric(port, 'dap_reconcile_total{controller="workspace"}'), 0)
    return proc, port


async def until(read: Callable[[], Awaitable[float]], at_least: float, every: float = 0.2) -> None:
    """Poll ``read`` until it gives ``at_least``."""
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


async def quiet(bench: Bench, seconds: float = 2.0) -> None:
    """Wait until the operator has made no request for ``seconds``."""
    last = -1
    while True:
        count = len(bench.operator_requests())
        if count == last:
            return
        last = count
        await asyncio.sleep(seconds)


async def main(n: int) -> int:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        bench = Bench(emulator, server)

        # Baseline: the same operator with no workspace at all.
        proc, port = await start_operator(bench.url)
        await asyncio.sleep(2)
        baseline_rss = rss_mib(proc.pid)
        await stop_operator(proc)

        await bench.create(
            "/apis/dap.io/v1alpha1/clusterclasses",
            {
                "apiVersion": "dap.io/v1alpha1",
                "kind": "ClusterClass",
                "metadata": {"name": "standard"},
                "spec": {"scaling": {"minReplicas": 1}},
            },
        )
        proc, port = await start_operator(bench.url)
        stop = asyncio.Event()
        controller = asyncio.create_task(bench.play_deployment_controller(stop))
        mark = bench.mark()
        started = time.perf_counter()
        print(f"creating {n} workspaces…", flush=True)
        for i in range(n):
            await bench.create(
                f"/apis/dap.io/v1alpha1/namespaces/{NS}/workspaces",
                {
                    "apiVersion": "dap.io/v1alpha1",
                    "kind": "Workspace",
                    "metadata": {"name": f"ws-{i:04d}", "namespace": NS},
                    "spec": {"clusterClass": "standard"},
                },
            )
        last_report = 0.0
        while True:
            ready = bench.ready_count()
            if ready >= n:
                break
            if time.perf_counter() - last_report > 2:
                deps = len(bench.objects("deployments"))
                print(
                    f"  {ready}/{n} Ready ({deps} Deployments) after {time.perf_counter() - started:.1f}s",
                    flush=True,
                )
                last_report = time.perf_counter()
            if time.perf_counter() - started > 600:
                print("FAILED: not all workspaces Ready within 600 s")
                return 1
            await asyncio.sleep(0.2)
        elapsed = time.perf_counter() - started
        await quiet(bench)
        stop.set()
        await controller
        requests = bench.operator_requests(mark)
        writes = [r for r in requests if r.method in WRITE_METHODS]
        watches = [r for r in requests if r.watch]
        reads = len(requests) - len(writes) - len(watches)
        rss = rss_mib(proc.pid)

        # Full resync: a restarted operator, unchanged workspaces.
        await stop_operator(proc)
        mark = bench.mark()
        proc, port = await start_operator(bench.url)
        await until(lambda: metric(port, 'dap_reconcile_total{controller="workspace"}'), n, every=0.5)
        await quiet(bench)
        resync = bench.operator_requests(mark)
        resync_writes = [r for r in resync if r.method in WRITE_METHODS]
        rss_after_resync = rss_mib(proc.pid)
        await stop_operator(proc)

    print()
    print(f"workspaces                      {n}")
    print(f"time until all Ready            {elapsed:.1f} s ({n / elapsed:.1f} workspaces/s)")
    print(
        f"API calls per workspace         {len(requests) / n:.2f} "
        f"(writes {len(writes) / n:.2f}, reads {reads / n:.2f}; "
        f"{len(watches)} watch streams opened during the run)"
    )
    print(
        f"resync of unchanged workspaces  {len(resync_writes)} write calls "
        f"({len(resync)} requests in all, target 0 writes)"
    )
    for r in resync_writes[:10]:
        print(f"    {r.method} {r.path}")
    print(f"operator RSS, 0 workspaces      {baseline_rss:.0f} MiB (baseline)")
    print(
        f"operator RSS, {n} workspaces    {rss:.0f} MiB ({rss / baseline_rss:.2f}x baseline; "
        f"after resync {rss_after_resync:.0f} MiB; target < 200 MiB)"
    )
    ok = not resync_writes and rss < 200
    print("OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workspaces", type=int, default=500)
    parser.add_argument(
        "--quick", action="store_true", help="5 workspaces: prove the benchmark runs (make test)"
    )
    args = parser.parse_args()
    args.workspaces = 5 if args.quick else args.workspaces
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(args.workspaces)))
    os._exit(130)
