"""Benchmark of tracing's cost: ``dap serve`` with tracing off, on with 1 % sampling and on with
100 %, driven alike in interleaved rounds (bench/loadgen.py), each on a database of its own.

    .venv/bin/python bench/traces.py [--rows 10000] [--seconds 8] [--rounds 3] [--quick] [--pin]
                                     [--before DIR [--mode 100%|1%]]

Three servers run the spec of bench/rest.py at once: one without ``OTEL_*`` variables (tracing
off: nothing of OpenTelemetry is imported), one with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio``
and ``OTEL_TRACES_SAMPLER_ARG=0.01``, one with ``always_on``. Both traced servers export over
OTLP/HTTP to a sink on loopback that answers every batch 200 (the exporter's work is measured,
not a backend's). Two scenarios: find-by-id (a request, an operation and one SQL statement per
find) and create (a request, an operation, the insert joined with its outbox event carrying the
traceparent). A traced server's CPU includes its sending process's (``dap.tracing.sender``, the
child that encodes and sends the spans). Goals (issue 45): off = today's figure; 1 % costs at most
3 %; 100 % at most 15 %.
Prints every figure and each traced mode's cost against off twice: of the medians, and paired
(each round against the same round's off: the median and range of those costs, steadier when the
machine drifts). The off line says how far off's rounds moved from their median: a cost smaller
than that range is within the run's noise. The CPU per request is the server's with its sending
process, and its own alone (``own``): a server busy on its core pays its own, the sender works on
another core when there is one. ``--pin`` gives that core: each server runs alone on core 0, and
Postgres, wrk, the senders and the sink on the other cores (Linux affinities), as in a pod with
a core for the event loop and room beside it; without it everything shares the machine's cores,
and on two of them the sender's CPU slows the server too (docs/performance.md). Exits non-zero
only when something fails to run.

``--before DIR`` measures a change: the servers are then off, ``--mode`` (100 % unless given) from
this tree and the same mode from the source tree ``DIR`` (its ``dap`` package first on
``PYTHONPATH``), interleaved alike. Three servers at most: a fourth (each with its pool of
``rest.POOL`` connections, its dispatcher and listeners) exceeds the embedded Postgres's
``max_connections``, and every server then answers errors (``TooManyConnectionsError``, seen
in the logs), which is what an earlier four-server run of this benchmark showed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import marshal
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jwt
import loadgen
import rest

SINK = """
import sys
from aiohttp import web

async def take(request):
    await request.read()
    return web.Response(status=200, content_type="application/x-protobuf", body=b"")

app = web.Application(client_max_size=64 * 1024 * 1024)
app.router.add_post("/v1/traces", take)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""
MODES = {
    "off": {},
    "1%": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
    "100%": {"OTEL_TRACES_SAMPLER": "always_on"},
}


def micro(n: int) -> None:
    """The spans of one REST write in-process, CPU time per request: a server span, the operation,
    two SQL statements (``statements.event``, what the connection of a sampled span makes of each:
    events on the operation; the statements themselves are not run here) and
    the traceparent taken for the outbox row, each span's record ``marshal``-ed as the exporter
    does; then the OTLP encoding of what was recorded, in batches of 2,048,
    as the sending process does (``dap.tracing.sender``: a process of its own, not the server's
    CPU). The pipe's writes and the HTTP export are in the end-to-end figures.
    ``0%``: the same sampler at a ratio of 0, every request dropped (the 99 of 100 at 1 %)."""
    from dap import tracing
    from dap.tracing import otlp, spans, statements

    query = "SELECT x FROM t_bench__item WHERE id = $1"
    operation = {
        "dap.tenant": "t-1",
        "dap.workspace": "default",
        "dap.entity": "bench/item",
        "enduser.id": "u",
    }
    answered = {"http.route": "/{ws}/api/{module}/{entity}", "http.response.status_code": 201}
    resource = otlp.resource({"service.name": "bench", "telemetry.sdk.language": "python"})

    def one() -> None:
        with tracing.span("POST", kind="server") as root:
            with tracing.span("create bench/item", attributes=operation):
                now = time.time_ns()
                statements.event(query, now - 100_000, now, None)
                statements.event(query, now - 100_000, now, None)
                tracing.traceparent()
            tracing.annotate(root, **answered)

    def timed(label: str, kept: list[spans.Record] | None = None) -> None:
        began = time.process_time()
        for _ in range(n):
            one()
        recorded = (time.process_time() - began) / n * 1e6
        encoded = 0.0
        if kept:
            began = time.process_time()
            for at in range(0, len(kept), 2048):
                otlp.request(resource, "dap", kept[at : at + 2048])
            encoded = (time.process_time() - began) / n * 1e6
        print(
            f"  {label:5} {recorded:7.2f} µs CPU/request in the traced process"
            f" + {encoded:6.2f} µs encoding in the sending process",
            flush=True,
        )

    def sink(kept: list[spans.Record]) -> Callable[[spans.Record], None]:
        """What the exporter's put does: each span's record ``marshal``-ed as the span ends (the
        pipe's writes are left out: system calls, in the end-to-end figures)."""

        def put(record: spans.Record) -> None:
            marshal.dumps(record, 2)
            kept.append(record)

        return put

    print(f"in-process spans of one write ({n} requests):")
    timed("off")
    for label, env in (
        ("0%", {**MODES["1%"], "OTEL_TRACES_SAMPLER_ARG": "0"}),  # every root dropped: the 99 of 100
        ("1%", MODES["1%"]),
        ("100%", MODES["100%"]),
    ):
        kept: list[spans.Record] = []
        with tracing.recording_into(sink(kept), env):
            timed(label, kept)


async def main(args: argparse.Namespace) -> int:
    micro(2_000 if args.quick else 20_000)
    if args.pin:  # all that starts from here runs on the other cores, until a server is given its own
        os.sched_setaffinity(0, OTHER_CORES)
        print(f"a server's own core: {SERVER_CORE}; the rest on {sorted(OTHER_CORES)}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-tracing-"))
    server_dsn, server = rest.start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        spec = tmp / "spec"
        spec.mkdir()
        (spec / "bench.yaml").write_text(rest.SPEC)
        sink_port = rest.port()
        sink = subprocess.Popen([sys.executable, "-c", SINK, str(sink_port)])  # noqa: ASYNC220 -- once, before the load
        procs.append(sink)
        servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
        ids: dict[str, list[str]] = {}
        shared = await rest.new_database(server_dsn) if args.shared_database else None
        for mode, (env, tree) in modes(args).items():
            # a database per mode by default: each server's dispatcher then claims only its own
            # outbox rows (sharing one, any server may deliver another's events, and be charged)
            dsn = shared or await rest.new_database(server_dsn)
            otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}", **env} if env else {}
            api_port = rest.port()
            source = {"PYTHONPATH": tree} if tree else {}
            proc = rest.spawn_serve(
                spec, dsn, api_port, extra_env={**otel, "OTEL_SERVICE_NAME": "bench", **source}
            )
            procs.append(proc)
            servers[mode] = (api_port, proc)
            await rest.wait_http(
                f"http://127.0.0.1:{api_port}/default/_ui/_meta/apps"
            )  # one migrates at a time
            if args.pin:  # its sending process, started by now, stays on the other cores
                own_core(proc.pid)
            if shared is None or not ids:
                print(f"loading {args.rows} rows ({mode}) ...", flush=True)
                ids[mode] = (await rest.load_rows(dsn, args.rows))[1]
            else:
                ids[mode] = next(iter(ids.values()))
        now = int(time.time())
        token = jwt.encode(
            {
                "sub": "u",
                "username": "alice",
                "roles": ["admin"],
                "iss": "svc",
                "iat": now,
                "exp": now + 3600,
            },
            rest.SECRET,
            algorithm="HS256",
        )
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        item = "/default/api/bench/item"
        body = json.dumps({"code": loadgen.UNIQUE, "title": "traced", "price": "1.50", "qty": 1})
        scenarios: dict[str, tuple[dict[str, list[str]], list[str]]] = {  # paths by mode, bodies
            "find": ({mode: [f"{item}/{i}" for i in found] for mode, found in ids.items()}, []),
            "create": ({mode: [item] for mode in ids}, [body]),
        }
        print(f"load generator: {loadgen.generator()}", flush=True)
        results: dict[str, dict[str, loadgen.Figure]] = {}
        for scenario, (by_mode, bodies) in scenarios.items():

            def target(
                port_: int, proc: subprocess.Popen[bytes], paths: list[str]
            ) -> Callable[[], loadgen.Load]:
                def run() -> loadgen.Load:
                    senders = list(loadgen.children_cpu(proc.pid))  # a traced server's sending process
                    return loadgen.load(
                        f"http://127.0.0.1:{port_}",
                        paths,
                        seconds=args.seconds,
                        headers=auth,
                        connections=args.workers,
                        warm=1.0,
                        bodies=bodies,  # noqa: B023
                        pids=[proc.pid, *senders],
                        helpers=senders,
                    )

                return run

            print(f"running {scenario}: {args.rounds} rounds of {args.seconds}s per mode ...", flush=True)
            targets = {mode: target(port_, proc, by_mode[mode]) for mode, (port_, proc) in servers.items()}
            results[scenario] = loadgen.interleave(targets, args.rounds)
        print(
            "\ntracing's cost (median of the rounds; spread min-max; cost against off: of the medians,"
            " then the median and range of each round's against the same round's off)"
        )
        for scenario, figures in results.items():
            off = figures["off"]
            off_own = own_cpu(off)
            for mode, fig in figures.items():
                low, high = fig.spread
                own = own_cpu(fig)
                if mode == "off":  # how far the same server moved between rounds: the run's noise
                    below, above = 100 * (low / fig.rps - 1), 100 * (high / fig.rps - 1)
                    said = f"  noise: rounds {below:+.1f} to {above:+.1f} % of their median"
                else:
                    said = (
                        f"  cost {costs(fig, off)}, {fig.cpu_us - off.cpu_us:+4.0f} µs CPU"
                        f" ({own - off_own:+.0f} in the server's own process)"
                    )
                print(
                    f"  {scenario:6} {mode:11} {fig.rps:8.0f} req/s ({low:.0f}-{high:.0f})"
                    f"  p50 {fig.p50_ms:6.2f} ms  p99 {fig.p99_ms:6.2f} ms"
                    f"  server CPU {fig.cpu_us:6.0f} µs/req (own {own:.0f})"
                    f"  errors {fig.errors}{said}"
                )
        return 0
    finally:
        rest.clean_up(procs, server, tmp)


def costs(traced: loadgen.Figure, off: loadgen.Figure) -> str:
    """``traced``'s throughput cost against ``off``: of the medians, and paired round by round (a
    round's servers run back to back, so a drift of the shared machine between rounds, which moved
    a server's figures by 10-15 %, weighs on both sides of each pair alike)."""
    paired = sorted(100 * (1 - r) for r in loadgen.paired(traced, off))
    return (
        f"{100 * (1 - traced.rps / off.rps):5.1f} % (paired: median {statistics.median(paired):.1f} %,"
        f" rounds {paired[0]:.1f} to {paired[-1]:.1f} %)"
    )


SERVER_CORE = 0
OTHER_CORES = os.sched_getaffinity(0) - {SERVER_CORE}  # Linux, as the CPU figures (``/proc``)


def own_core(pid: int) -> None:
    """Every thread of the server ``pid`` on :data:`SERVER_CORE` (Linux: an affinity is a thread's;
    a thread started later inherits its creator's)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {SERVER_CORE})


def own_cpu(figure: loadgen.Figure) -> float:
    """The server process's own CPU per request, its sending process's taken off: what a server
    busy on its core pays (the sender works on another core when there is one)."""
    return statistics.median(r.cpu_us - r.helpers_cpu_us for r in figure.runs)


def modes(args: argparse.Namespace) -> dict[str, tuple[dict[str, str], str | None]]:
    """The servers to run: each mode's ``OTEL_*`` variables and the source tree (``None``: this one)."""
    if not args.before:
        return {mode: (env, None) for mode, env in MODES.items()}
    return {
        "off": ({}, None),
        args.mode: (MODES[args.mode], None),
        f"{args.mode} before": (MODES[args.mode], args.before),
    }


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=loadgen.CONNECTIONS)
    parser.add_argument(
        "--shared-database", action="store_true", help="the three servers on one database (as before)"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="each server on core 0 alone, all else (Postgres, wrk, senders, the sink) on the other cores",
    )
    parser.add_argument("--quick", action="store_true", help="small and short: proves the benchmark runs")
    parser.add_argument("--before", help="a source tree to compare with: off, --mode and --mode from DIR")
    parser.add_argument("--mode", choices=["1%", "100%"], default="100%")
    args = parser.parse_args()
    if args.pin and not OTHER_CORES:
        parser.error("--pin needs at least two cores")
    if args.before:
        args.before = str(Path(args.before).resolve())
    if args.quick:
        args.rows, args.seconds, args.rounds = 2_000, 2.0, 1
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
