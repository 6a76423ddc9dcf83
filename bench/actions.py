"""Workflow benchmarks, one section per function (``main`` runs them in turn).

    .venv/bin/python bench/actions.py [--quick] [--seconds 4] [--rounds 3] [--workers 16] [--records 2000]

Sections:

- :func:`action_throughput` — custom actions against a plain update **in the same run**: one
  ``dap serve`` over one database, ``--records`` records, ``--workers`` concurrent clients each
  picking a random record, rounds interleaved with the order rotated, so drift weighs on every
  target alike. Targets: ``update`` (``PATCH /{id}`` of one field), ``transition`` (``POST
  /{id}/bump``: a custom action moving the state, version bumped, same write size), ``native``
  (``POST /{id}/note``: params validated, a condition, a native handler registered by entry point)
  and ``service`` (``POST /bench/tools/ping``: a service action with a native handler, no record),
  and ``granted`` (the same service action called through a consuming app whose grant the owner
  gave: ``POST /_apps/bench/portal/bench/tools/ping``, the grant read on every call; issue 47).
  Target: each custom action at least 0.7x the update's throughput. Measured twice: target
  after target (rotated rounds), and all targets at once (``workers/4`` clients each in the same
  seconds, so the shared machine's drift weighs on every target alike; read this ratio first).

The approval inbox and escalation lateness are measured by ``bench/workflows.py``. ``--quick``
runs every section small and short, to prove it runs. Uses ``DAP_BENCH_DSN`` when set, else an
embedded Postgres. The client is Python (aiohttp) in the same machine budget, which compresses
absolute figures alike for every target; the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import rest

ACTIONS_SPEC = """apiVersion: dap.io/v1
kind: Module
metadata: {name: bench}
spec: {title: Bench}
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: card, module: bench}
spec:
  fields:
    - {name: title, type: string, required: true}
    - {name: qty, type: integer}
  actions:
    - {name: bump}
    - name: note
      impl: {type: native, handler: bench-note}
      params:
        fields:
          - {name: text, type: string, required: true}
      conditions:
        - {script: "len(params.text) < 200", message: Keep the note short.}
  state_machine:
    states: [open]
    transitions:
      - {name: bump, from: open, to: open, action: bump}
  expose: [{type: rest}]
---
apiVersion: dap.io/v1
kind: Service
metadata: {name: tools, module: bench}
spec:
  expose: [{type: rest}]
  actions:
    - {name: ping, impl: {type: native, handler: bench-note}}
---
apiVersion: dap.io/v1
kind: App
metadata: {name: back, module: bench}
spec:
  interfaces: [{service: tools}]
---
apiVersion: dap.io/v1
kind: App
metadata: {name: portal, module: bench}
spec:
  consumes: [{app: back, service: tools}]
"""
HANDLER = "async def note(ctx):\n    return {'ok': True}\n"


def install_handler(root: Path) -> Path:
    """The native handler as an installed distribution (entry point ``bench-note``) under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "bench_handlers.py").write_text(HANDLER)
    info = root / "bench_handlers-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dap.actions]\nbench-note = bench_handlers:note\n")
    return root


Request = tuple[str, str, dict[str, Any] | None]


async def _drive(
    base: str, make: Any, *, seconds: float, workers: int, headers: dict[str, str]
) -> tuple[float, list[float], int]:
    """``workers`` clients for ``seconds``; throughput (req/s), latencies (s), failures."""
    latencies: list[float] = []
    failures = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=workers), headers=headers) as http:
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal failures
            while time.perf_counter() < stop_at:
                method, path, body = make()
                started = time.perf_counter()
                async with http.request(method, base + path, json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        failures += 1
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.perf_counter() - began
    return len(latencies) / elapsed, latencies, failures


async def action_throughput(args: argparse.Namespace, server_dsn: str, tmp: Path) -> list[str]:
    """Custom actions against a plain update in one run (see the module's docstring)."""
    dsn = await rest.new_database(server_dsn)
    spec = tmp / "actions-spec"
    spec.mkdir()
    (spec / "bench.yaml").write_text(ACTIONS_SPEC)
    handlers = install_handler(tmp / "handlers")
    api_port = rest.port()
    path = os.pathsep.join(filter(None, [str(handlers), os.environ.get("PYTHONPATH")]))  # keep the tree's
    serve = rest.spawn_serve(spec, dsn, api_port, extra_env={"PYTHONPATH": path})
    try:
        api = f"http://127.0.0.1:{api_port}"
        await rest.wait_http(f"{api}/default/_ui/_meta/apps")
        auth = rest.bench_token("alice", ["admin"])
        card = "/default/api/bench/card"
        ids: list[str] = []
        async with aiohttp.ClientSession(headers=auth) as http:
            for i in range(args.records):
                async with http.post(api + card, json={"title": f"card {i}", "qty": i}) as resp:
                    assert resp.status == 201, await resp.text()
                    ids.append((await resp.json())["data"]["id"])
            async with http.get(api + "/default/api/_grants") as resp:  # the boot asked: grant it
                [request] = (await resp.json())["data"]
            async with http.post(api + f"/default/api/_grants/{request['id']}/grant", json={}) as resp:
                assert resp.status == 200, await resp.text()
        pick = random.Random(7).choice
        targets: dict[str, Any] = {
            "update": lambda: ("PATCH", f"{card}/{pick(ids)}", {"qty": random.randrange(1000)}),
            "transition": lambda: ("POST", f"{card}/{pick(ids)}/bump", None),
            "native": lambda: ("POST", f"{card}/{pick(ids)}/note", {"text": "seen"}),
            "service": lambda: ("POST", "/default/api/bench/tools/ping", None),
            "granted": lambda: ("POST", "/default/api/_apps/bench/portal/bench/tools/ping", None),
        }
        rates: dict[str, list[float]] = {name: [] for name in targets}
        latencies: dict[str, list[float]] = {name: [] for name in targets}
        failures = dict.fromkeys(targets, 0)
        names = list(targets)
        for name in names:  # warm every path once, unmeasured
            await _drive(api, targets[name], seconds=0.5, workers=args.workers, headers=auth)
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                rps, lat, failed = await _drive(
                    api, targets[name], seconds=args.seconds, workers=args.workers, headers=auth
                )
                rates[name].append(rps)
                latencies[name].extend(lat)
                failures[name] += failed
        lines = [
            f"custom action throughput: {args.records} records, {args.workers} clients, "
            f"{args.rounds} rounds of {args.seconds:g}s per target (python client)"
        ]
        base = statistics.median(rates["update"])
        for name in names:
            rps = statistics.median(rates[name])
            lat = sorted(latencies[name])
            p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
            paired = [r / u for r, u in zip(rates[name], rates["update"], strict=True)]
            verdict = (
                "" if name == "update" else ("  ok (>= 0.70x)" if rps / base >= 0.7 else "  BELOW 0.70x")
            )
            lines.append(
                f"  {name:<11} {rps:>7.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                f"{rps / base:.2f}x update (rounds {min(paired):.2f}-{max(paired):.2f})  "
                f"failed {failures[name]}{verdict}"
            )
        # the same comparison with every target loaded at once: each gets workers/4 closed-loop
        # clients in the same seconds, so a drift of the shared machine hits all of them alike
        share = max(1, args.workers // len(names))
        mixed: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.rounds):
            runs = await asyncio.gather(
                *(_drive(api, targets[n], seconds=args.seconds, workers=share, headers=auth) for n in names)
            )
            for name, (rps, _lat, failed) in zip(names, runs, strict=True):
                mixed[name].append(rps)
                failures[name] += failed
        lines.append(f"  at once ({share} clients each, {args.rounds} rounds of {args.seconds:g}s):")
        for name in names:
            paired = [r / u for r, u in zip(mixed[name], mixed["update"], strict=True)]
            lines.append(
                f"  {name:<11} {statistics.median(mixed[name]):>7.0f} req/s  "
                f"{statistics.median(paired):.2f}x update (rounds {min(paired):.2f}-{max(paired):.2f})"
            )
        return lines
    finally:
        rest.stop(serve)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small and short: proves every section runs")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.workers, args.records = 0.5, 1, 4, 50
    return args


async def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-wf-"))
    server_dsn, server = rest.start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for line in await action_throughput(args, server_dsn, tmp):
            print(line, flush=True)
        return 0
    finally:
        rest.clean_up(procs, server, tmp)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
