"""Benchmark of workspace routing (spec "General rules" 5): 10,000 workspaces over 100 clusters.

Two ways of placing the same workspaces on the same clusters, in one run:

1. pure: ``routing.choose`` over an in-memory registry whose counts are updated after each
   decision — the baseline, the cost of the rule itself;
2. region: what the region control does — each Workspace recorded as a binding in Postgres
   (``bindings.record_workspace``), then one routing pass (``bindings.route``: registry and
   bindings read, ``choose`` per binding in memory, the changed bindings written in one
   statement), then a second pass in which nothing moves (the cost of every later pass).

For each: decisions per second and the imbalance after placement, max/mean of workspaces per
cluster (1.0 is perfectly even). Two registries: every cluster at the same load (ties are broken
by how full a cluster is, so they fill evenly) and seeded random loads (the lowest load wins, so
the least loaded clusters fill to their maximum first: imbalance is the rule's, not noise).

Clusters have room for twice the workspaces (``--max`` per cluster). Embedded Postgres in a
temporary directory unless ``DAP_BENCH_DSN`` is set. ``--quick``: 2,000 workspaces over 20
clusters, a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import asyncpg

from dap import embedded
from dap.control.clusters import routing
from dap.control.ids import ClusterId, WorkspaceId
from dap.control.kube import bindings
from dap.control.storage import store

LABELS = {routing.REGION_LABEL: "eu", routing.CLASS_LABEL: "standard"}
SPEC = {"region": "eu", "clusterClass": "standard"}


@dataclasses.dataclass(frozen=True)
class Result:
    name: str
    decisions: int
    seconds: float
    counts: Counter[str]
    clusters: int

    @property
    def rate(self) -> float:
        return self.decisions / self.seconds

    @property
    def imbalance(self) -> float:
        loads = [self.counts.get(f"c{i:03d}", 0) for i in range(self.clusters)]
        return max(loads) / statistics.mean(loads)

    def line(self) -> str:
        placed = sum(self.counts.values())
        return (
            f"{self.name:<22} {self.decisions:>6} decisions in {self.seconds:6.2f} s = {self.rate:>9,.0f}/s"
            f"   placed {placed:>6}   imbalance max/mean {self.imbalance:.2f}"
        )


def registry(clusters: int, maximum: int, loads: list[float]) -> list[routing.ClusterInfo]:
    return [
        routing.ClusterInfo(ClusterId(f"c{i:03d}"), LABELS, "active", 0, maximum, loads[i])
        for i in range(clusters)
    ]


def pure(name: str, workspaces: int, clusters: list[routing.ClusterInfo]) -> Result:
    by_id = {c.cluster_id: c for c in clusters}
    counts: Counter[str] = Counter()
    started = time.perf_counter()
    for n in range(workspaces):
        placement = routing.Placement(WorkspaceId(f"m/w{n:05d}"), "standard", "eu")
        chosen = routing.choose(placement, by_id.values())
        info = by_id[chosen]
        by_id[chosen] = dataclasses.replace(info, workspace_count=info.workspace_count + 1)
        counts[chosen] += 1
    return Result(name, workspaces, time.perf_counter() - started, counts, len(clusters))


async def region(
    name: str, server_dsn: str, workspaces: int, clusters: list[routing.ClusterInfo]
) -> tuple[Result, float, float]:
    """Place through Postgres; returns the result, the seconds spent recording the bindings and
    those of a second pass in which nothing moves (the region's steady state)."""
    database = f"bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    await admin.execute(f'CREATE DATABASE "{database}"')
    try:
        pool = await store.connect(embedded.dsn_for_database(server_dsn, database), max_size=4)
        try:
            async with pool.acquire() as conn:
                for c in clusters:
                    spec = {"maxWorkspaces": c.max_workspaces, "load": c.load}
                    await bindings.record_cluster(conn, c.cluster_id, c.labels, spec)
            started = time.perf_counter()
            async with pool.acquire() as conn, conn.transaction():
                for n in range(workspaces):
                    await bindings.record_workspace(conn, "m", f"w{n:05d}", SPEC)
            recorded = time.perf_counter() - started
            started = time.perf_counter()
            await bindings.route(pool)
            seconds = time.perf_counter() - started
            started = time.perf_counter()
            if await bindings.route(pool):
                raise AssertionError("a second pass moved workspaces: routing is not stable")
            steady = time.perf_counter() - started
            counts = Counter(b.cluster for b in await bindings.bindings(pool) if b.cluster)
        finally:
            await pool.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    return Result(name, workspaces, seconds, counts, len(clusters)), recorded, steady


async def main_async(args: argparse.Namespace, server_dsn: str) -> int:
    workspaces, count = (2_000, 20) if args.quick else (args.workspaces, args.clusters)
    maximum = max(1, 2 * workspaces // count) if args.max is None else args.max
    rng = random.Random(16)
    scenarios = {
        "equal load": [0.5] * count,
        "random load": [round(rng.uniform(0.05, 0.95), 3) for _ in range(count)],
    }
    print(f"routing: {workspaces} workspaces over {count} clusters (max {maximum} each)")
    for label, loads in scenarios.items():
        baseline = pure(f"pure, {label}", workspaces, registry(count, maximum, loads))
        placed, recorded, steady = await region(
            f"region, {label}", server_dsn, workspaces, registry(count, maximum, loads)
        )
        print(baseline.line())
        print(placed.line() + f"   (+{recorded:.2f} s recording the bindings)")
        print(f"{'':<22} a second pass, nothing moves: {steady:.2f} s")
        print(f"{'':<22} region/pure throughput {placed.rate / baseline.rate:.2f}x")
        if sum(placed.counts.values()) != workspaces or placed.counts != baseline.counts:
            print("FAIL: the region placed differently from the pure chooser", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 workspaces over 20 clusters")
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--max", type=int, default=None, help="maxWorkspaces per cluster (2x room)")
    args = parser.parse_args(argv)
    given = os.environ.get("DAP_BENCH_DSN")
    if given:
        return asyncio.run(main_async(args, given))
    with tempfile.TemporaryDirectory(prefix="dap-bench-routing-") as tmp:
        dsn, handle = embedded.start(Path(tmp) / "pg")
        try:
            return asyncio.run(main_async(args, dsn))
        finally:
            embedded.stop(handle, Path(tmp) / "pg")


if __name__ == "__main__":
    sys.exit(main())
