"""Benchmark of the logs query (``GET /logs`` on the admin listener): ``dap.logquery`` filters over
``dap.logs.Window`` filled with 100,000 lines (``--quick``: 20,000), the issue's target being
p99 <= 50 ms per query at 100,000.

The lines are a mix of what a server writes (request lines of several workspaces and routes,
warnings, errors, a few trace ids); each query shape below runs ``--runs`` times and prints its
p50 and p99 in milliseconds, wall-clock and the process's CPU time (on a shared machine the
wall-clock p99 includes the time the scheduler gave other processes). The worst shapes are those
that match little: they read the whole window before they can answer (a rare text, a request id
of the oldest line).
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import time

from dap import logquery, logs

QUERIES = {
    "everything, limit 100": ("", 100),
    "level>=warn": ("level>=warn", 100),
    "one workspace and level": ("workspace=ws-3 and level>=info", 100),
    "rare text (scans all)": ("needle-never-there", 100),
    "request id of the oldest line": ("request=req-0", 100),
    "compound (scans all)": ("(workspace=ws-1 or workspace=ws-2) not level=debug logger=dap.nowhere", 100),
    "time range, limit 1000": ("ts>=2000-01-01T00:00:00Z status=500", 1000),
}


def fill(size: int) -> logs.Window:
    rng = random.Random(7)
    window = logs.Window(size)
    levels = [logging.DEBUG] * 6 + [logging.INFO] * 3 + [logging.WARNING, logging.ERROR]
    names = ["dap.server.web.app", "dap.server.events.dispatcher", "dap.server.workflows.jobs"]
    for i in range(size):
        record = logging.LogRecord(rng.choice(names), rng.choice(levels), __file__, 1, "request", None, None)
        record.ctx = {
            "request_id": f"req-{i}",
            "workspace": f"ws-{rng.randrange(10)}",
            "route": "/{ws}/api/{app}/{entity}",
            "status": rng.choice((200, 200, 200, 201, 404, 500)),
        }
        window.append(logs.Entry(record, None))
    return window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 lines and 10 runs")
    parser.add_argument("--lines", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0)
    args = parser.parse_args()
    size = args.lines or (20_000 if args.quick else 100_000)
    runs = args.runs or (10 if args.quick else 50)
    window = fill(size)
    print(f"logs query over {size:,} lines, {runs} runs per shape (ms)")
    worst = worst_cpu = 0.0
    for title, (text, limit) in QUERIES.items():
        times, cpu = [], []
        for _ in range(runs):
            started, began = time.perf_counter(), time.process_time()
            window.query(logquery.parse(text), limit=limit)
            cpu.append((time.process_time() - began) * 1000)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        cpu.sort()
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        cpu99 = cpu[min(len(cpu) - 1, int(len(cpu) * 0.99))]
        worst = max(worst, p99)
        worst_cpu = max(worst_cpu, cpu99)
        print(
            f"  {title:34} p50 {statistics.median(times):7.2f}  p99 {p99:7.2f}"
            f"   CPU p50 {statistics.median(cpu):7.2f}  p99 {cpu99:7.2f}"
        )
    verdict = "meets" if worst <= 50 else "MISSES"
    print(
        f"worst p99 {worst:.2f} ms: {verdict} the 50 ms target"
        + (" (at 100,000 lines)" if size == 100_000 else "")
    )
    if size == 100_000 and worst > 50 and "--strict" in sys.argv:
        sys.exit(1)


if __name__ == "__main__":
    main()
