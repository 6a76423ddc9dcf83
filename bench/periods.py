"""What the accounting-period check costs a create: a transaction entity against a master entity.

    .venv/bin/python bench/periods.py [--seconds 10] [--workers 8]

Before issue 43 a transaction entity without a backdate policy created through exactly the path
of a master entity; now every create of one reads its period ``FOR SHARE`` in its transaction
(docs/decisions.md, issue 43). One ``dap serve`` on one database serves three entities with the
same fields, and ``--workers`` concurrent clients ``POST`` for ``--seconds`` per case, in
``--rounds`` interleaved rounds (so that the machine's drift over the run hits every case alike):

- ``master``: ``bench/plain``, no check (the path before);
- ``open period``: ``bench/posting`` (``characteristic: transaction``) dated in an open period;
- ``no period``: ``bench/posting`` dated where no period is (the statement finds nothing).

Prints creates/s and the median and p99 latency of each, and the ratios to ``master``. Uses
``DAP_BENCH_DSN`` when set, else an embedded Postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import rest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = {
    "module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: bench}\nspec: {title: Bench}\n",
    "plain.yaml": """apiVersion: dap.io/v1
kind: Entity
metadata: {name: plain, module: bench}
spec:
  fields:
    - {name: posting_date, type: date}
    - {name: amount, type: integer}
  expose: [{type: rest}]
""",
    "posting.yaml": """apiVersion: dap.io/v1
kind: Entity
metadata: {name: posting, module: bench}
spec:
  characteristic: transaction
  fields:
    - {name: posting_date, type: date}
    - {name: amount, type: integer}
  expose: [{type: rest}]
""",
}


async def _run(base: str, entity: str, day: str, seconds: float, workers: int) -> tuple[float, list[float]]:
    headers = rest.bench_token("bench", ["admin"])
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(http: aiohttp.ClientSession) -> None:
        n = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            async with http.post(
                f"{base}/default/api/bench/{entity}", json={"posting_date": day, "amount": n}, headers=headers
            ) as resp:
                await resp.read()
                assert resp.status == 201, resp.status
            latencies.append(time.perf_counter() - t0)
            n += 1

    async with aiohttp.ClientSession() as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(workers)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="dap-bench-periods-") as tmp:
        scratch = Path(tmp)
        spec = scratch / "spec"
        spec.mkdir()
        for name, text in SPEC.items():
            (spec / name).write_text(text)
        server_dsn, server = rest.start_postgres(scratch)
        procs = []
        try:
            dsn = await rest.new_database(server_dsn)
            port = rest.port()
            procs.append(rest.spawn_serve(spec, dsn, port))
            base = f"http://127.0.0.1:{port}"
            await rest.wait_http(f"{base}/default/_ui/_meta/apps")
            headers = rest.bench_token("bench", ["admin"])
            async with aiohttp.ClientSession() as http:
                body = {"name": "2026-01", "starts": "2026-01-01", "ends": "2026-01-31"}
                async with http.post(f"{base}/default/api/_periods", json=body, headers=headers) as resp:
                    assert resp.status == 201, await resp.text()
            await _run(base, "plain", "2026-01-10", 1.0, args.workers)  # warm-up
            cases = [
                ("master", "plain", "2026-01-10"),
                ("open period", "posting", "2026-01-10"),
                ("no period", "posting", "2027-01-10"),
            ]
            done: dict[str, list[float]] = {label: [] for label, _, _ in cases}
            spent: dict[str, float] = dict.fromkeys(done, 0.0)
            for _ in range(args.rounds):  # interleaved: the machine's drift hits every case alike
                for label, entity, day in cases:
                    rate, lat = await _run(base, entity, day, args.seconds / args.rounds, args.workers)
                    done[label] += lat
                    spent[label] += len(lat) / rate
            figures = {}
            for label, lat in done.items():
                lat.sort()
                figures[label] = rate = len(lat) / spent[label]
                p99 = lat[int(len(lat) * 0.99) - 1] * 1000
                print(
                    f"{label:12s} {rate:8.0f} creates/s  p50 {statistics.median(lat) * 1000:6.2f} ms  "
                    f"p99 {p99:6.2f} ms  ({len(lat)} creates)",
                    flush=True,
                )
            for label in ("open period", "no period"):
                print(f"{label} / master: {figures[label] / figures['master']:.2f}x")
        finally:
            rest.clean_up(procs, server)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    parser.add_argument("--quick", action="store_true", help="small and short: that it runs (make test)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.workers = 1.0, 1, 4
    sys.exit(asyncio.run(main(args)))
