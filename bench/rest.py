"""REST benchmark: ``dap serve`` against a minimal aiohttp + asyncpg handler, in the same run.

    .venv/bin/python bench/rest.py [--rows 100000] [--seconds 8] [--workers 32] [--boot-only] [--quick]

Steps: start an embedded Postgres (or use ``DAP_BENCH_DSN``), load ``--rows`` rows into one
workspace, spawn ``dap serve`` and the floor (``bench/floor.py``: same pool size, the SQL the
engine builds, dap's JSON encoder, no auth, no validation), and drive both over loopback with a
bounded client (``--workers`` concurrent requests for ``--seconds`` each): find-by-id and a
filtered list against the baseline, find-by-id with the cache declared against without, and the
document semantics (update of a draft, submit, a list under row scope) against their plain
counterparts. Before all that, boot time of a 300-entity spec to the first answered request is
measured next to the time Postgres needs to create the same tables (``--boot-only`` for just
that). Prints every figure and ratio; exits non-zero only when something fails to run.
``--quick`` (run by ``make test``) shrinks every size, boots included, to prove the benchmark runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import boots
import jwt
import loadgen
import profiling
import semantics

ROOT = Path(__file__).resolve().parent.parent
FLOOR = Path(__file__).with_name("floor.py")  # the floor's server, run as its own process
DAP = str(Path(sys.executable).parent / "dap")
SECRET = "bench-secret-bench-secret-bench-secret!"
POOL = 10
LIST_QUERY = "category=red&price[gt]=50&sort=-price&limit=50"

SPEC = """apiVersion: dap.io/v1
kind: Module
metadata: {name: bench}
spec: {title: Bench}
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: bench}
spec:
  fields:
    - {name: code, type: string, required: true, unique: true}
    - {name: title, type: string, required: true}
    - {name: price, type: money, scale: 2, required: true}
    - {name: qty, type: integer}
    - {name: category, type: enum, enum_values: [red, green, blue, black, white], index: true}
    - {name: launched, type: date}
  expose:
    - type: rest
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: doc, module: bench}
spec:
  lifecycle: true
  fields:
    - {name: code, type: string, required: true}
    - {name: qty, type: integer}
    - {name: buyer, type: string, index: true}
  assignments:
    - {dimension: buyer, field: buyer, principal_field: username}
  expose:
    - type: rest
"""
# Sizes; --quick lowers them all.
BOOT_ENTITIES = 300  # the spec whose boot is measured
BOOT_ROUNDS = 3  # boots measured, each on a new database; the median is reported
WARM_SECONDS = 1.0  # warm-up of each drive (pools, prepared statements)
FIND_IDS = 2000  # ids sampled for the find scenarios


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def wait_http(url: str, limit: float = 120.0) -> float:
    started = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        while time.perf_counter() - started < limit:
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return time.perf_counter() - started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.02)
    raise RuntimeError(f"{url} did not answer within {limit}s")


# --- setup -------------------------------------------------------------------------------------


async def load_rows(dsn: str, rows: int) -> tuple[str, list[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        rng = random.Random(7)
        colors = ["red", "green", "blue", "black", "white"]
        records = [
            (
                tenant,
                uuid.uuid4(),
                f"C{i:07d}",
                f"Item {i}",
                Decimal(rng.randint(100, 100000)) / 100,
                rng.randint(0, 500),
                colors[i % 5],
                "alice",
                "alice",
            )
            for i in range(rows)
        ]
        await conn.copy_records_to_table(
            "bench__item",
            records=records,
            columns=["tenant_id", "id", "code", "title", "price", "qty", "category", "created_by", "owner"],
        )
        await conn.execute("ANALYZE bench__item")
        ids = [str(r[1]) for r in rng.sample(records, FIND_IDS)]
        return str(tenant), ids
    finally:
        await conn.close()


def spawn_serve(
    spec: Path, dsn: str, port_: int, metrics_port: int | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update(extra_env or {})
    env.update(
        {
            "DAP_DSN": dsn,
            "DAP_JWT_SECRET": SECRET,
            "DAP_CORS_ORIGIN": "http://localhost:3000",
            "DAP_LOG_LEVEL": "warn",
            "DAP_POOL_SIZE": str(POOL),
        }
    )
    metrics = f"127.0.0.1:{metrics_port}" if metrics_port else ""
    return subprocess.Popen(
        [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port_}", "--metrics-addr", metrics],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def spawn_baseline(
    port_: int,
    dsn: str,
    tenant: str,
    log: Path | None = None,
    *,
    fifo: bool = False,
    events: bool = False,
    wal: bool = False,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("floor.py")),
            str(port_),
            dsn,
            tenant,
            *(["--fifo"] if fifo else []),
            *(["--events"] if events else []),
            *(["--wal"] if wal else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb") if log is not None else subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


async def new_database(server_dsn: str) -> str:
    from dap import embedded

    name = f"bench_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return embedded.dsn_for_database(server_dsn, name)


def bench_token(username: str, roles: list[str]) -> dict[str, str]:
    now = int(time.time())
    claims = {
        "sub": username,
        "username": username,
        "roles": roles,
        "iss": "svc",
        "iat": now,
        "exp": now + 3600,
    }
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


# --- find-by-id cache: the same rows found through a server that caches them ------------------


CACHE_LINE = "  cache: {ttl: 1h}\n"  # the find cache, declared on bench/item


async def cache_scenario(
    tmp: Path,
    dsn: str,
    ports: tuple[int, int],
    ids: list[str],
    auth: dict[str, str],
    args: argparse.Namespace,
) -> tuple[subprocess.Popen[bytes], list[str]]:
    """Find-by-id with ``cache: {ttl: 1h}`` against the same server without it, on the same rows.

    A second ``dap serve`` runs the spec with ``cache`` declared on ``bench/item`` (same table);
    every id is found once first, so the timed runs are hits: a freshness round trip on the
    listener connection (shared by concurrent hits) instead of a pooled query. Interleaved rounds
    with the floor's find as well, at ``--workers`` connections and at one (where the round trip
    is not shared). Returns the process for the caller to stop, and the figures' lines.
    """
    floor_port, uncached_port = ports
    spec = tmp / "spec-cached"
    spec.mkdir()
    (spec / "bench.yaml").write_text(SPEC.replace("  expose:", CACHE_LINE + "  expose:"))
    cached_port = port()
    proc = spawn_serve(spec, dsn, cached_port)
    base = f"http://127.0.0.1:{cached_port}/default/api/bench/item"
    await wait_http(f"http://127.0.0.1:{cached_port}/default/_ui/_meta/apps")
    async with aiohttp.ClientSession(headers=auth) as http:
        for rid in ids:  # every answer stored (the listener is up by the second pass)
            for _ in range(2):
                async with http.get(f"{base}/{rid}") as resp:
                    await resp.read()
    targets = {"floor": floor_port, "uncached": uncached_port, "cached": cached_port}
    paths = [f"/default/api/bench/item/{i}" for i in ids]
    lines = ["", "find-by-id cache (same rows; dap with the cache declared or not, and the floor):"]
    for workers in (args.workers, 1):
        print(f"running cached find, {workers} connection(s) ...", flush=True)
        got = loadgen.interleave(
            {
                name: lambda p=p, w=workers: loadgen.load(  # type: ignore[misc]
                    f"http://127.0.0.1:{p}",
                    paths,
                    seconds=args.seconds,
                    headers=auth,
                    connections=w,
                    warm=WARM_SECONDS,
                )
                for name, p in targets.items()
            },
            args.rounds,
        )
        lines += [figure.line(f"find {name} c={workers}") for name, figure in got.items()]
        lines.append(
            f"  c={workers}: cached/floor {loadgen.ratio(got['cached'], got['floor'])}, "
            f"cached/uncached {loadgen.ratio(got['cached'], got['uncached'])}, "
            f"uncached/floor {loadgen.ratio(got['uncached'], got['floor'])}"
        )
    return proc, lines


async def boot_figures(server_dsn: str, tmp: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    """Boot of a 300-entity spec to its first answer, against Postgres creating the same tables.

    Three rounds, each on a new database: a first boot (creates the tables), a reboot (tables
    exist), and the plain DDL run by itself; the medians are compared.
    """
    big = tmp / "big"
    boots.big_spec(big, BOOT_ENTITIES)
    firsts: list[float] = []
    reboots: list[float] = []
    ddls: list[float] = []
    for _ in range(BOOT_ROUNDS):
        big_dsn = await new_database(server_dsn)
        for into in (firsts, reboots):
            big_port = port()
            started = time.perf_counter()
            proc = spawn_serve(big, big_dsn, big_port)
            procs.append(proc)
            await wait_http(f"http://127.0.0.1:{big_port}/default/_ui/_meta/apps")
            into.append(time.perf_counter() - started)
            stop(proc)
        ddls.append(await boots.ddl_seconds(await new_database(server_dsn), big))
    boot, reboot, ddl = (sorted(x)[len(x) // 2] for x in (firsts, reboots, ddls))
    rounds = ", ".join(f"{b:.2f}/{d:.2f}" for b, d in zip(firsts, ddls, strict=True))
    return (
        f"boot with {BOOT_ENTITIES} entities to first answered request (median of {BOOT_ROUNDS}): "
        f"{boot:.2f}s creating the tables, "
        f"{reboot:.2f}s when they exist; Postgres creating the same tables once: {ddl:.2f}s, twice: "
        f"{2 * ddl:.2f}s; boot/(2 x DDL) = {boot / (2 * ddl):.2f} (rounds boot/DDL: {rounds})"
    )


def start_postgres(tmp: Path) -> tuple[str, Any]:
    """``DAP_BENCH_DSN``, or an embedded Postgres under ``tmp`` (its handle to clean up)."""
    server_dsn = os.environ.get("DAP_BENCH_DSN")
    if server_dsn:
        return server_dsn, None
    from dap import embedded

    print("starting embedded Postgres ...", flush=True)
    return embedded.start(tmp / "pg")


def clean_up(procs: list[subprocess.Popen[bytes]], server: Any, scratch: Path | None = None) -> None:
    """Stops ``procs`` and the embedded Postgres, then removes ``scratch`` (its data directory among
    what it holds: a few hundred MB a run, which /tmp would otherwise keep)."""
    for proc in procs:
        if proc.poll() is None:
            stop(proc)
    if server is not None:
        server.cleanup()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


async def boot_only() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-"))
    server_dsn, server = start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        print(await boot_figures(server_dsn, tmp, procs))
        return 0
    finally:
        clean_up(procs, server, tmp)


async def main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-"))
    server_dsn, server = start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # boots first, while Postgres is quiet (no autovacuum or checkpoint after the load runs)
        boot_line = ""
        if not args.reads:
            print("measuring boots of a 300-entity spec ...", flush=True)
            boot_line = await boot_figures(server_dsn, tmp, procs)
        dsn = await new_database(server_dsn)
        spec = tmp / "spec"
        spec.mkdir()
        (spec / "bench.yaml").write_text(SPEC)
        api_port, admin_port, base_port = port(), port(), port()
        serve = spawn_serve(spec, dsn, api_port, admin_port)
        procs.append(serve)
        await wait_http(f"http://127.0.0.1:{api_port}/default/_ui/_meta/apps")
        print(f"loading {args.rows} rows ...", flush=True)
        started = time.perf_counter()
        tenant, ids = await load_rows(dsn, args.rows)
        print(f"  loaded in {time.perf_counter() - started:.1f}s", flush=True)
        baseline = spawn_baseline(base_port, dsn, tenant, tmp / "baseline.log")
        fifo_port = port()
        fifo = spawn_baseline(fifo_port, dsn, tenant, tmp / "baseline-fifo.log", fifo=True)
        procs += [baseline, fifo]
        for floor_port, floor_log in ((base_port, "baseline.log"), (fifo_port, "baseline-fifo.log")):
            try:
                await wait_http(f"http://127.0.0.1:{floor_port}/default/api/bench/item/{ids[0]}", limit=60)
            except RuntimeError:
                print((tmp / floor_log).read_text()[-2000:], file=sys.stderr)
                raise

        now = int(time.time())
        token = jwt.encode(
            {"sub": "u", "username": "alice", "iss": "svc", "iat": now, "exp": now + 3600},
            SECRET,
            algorithm="HS256",
        )
        auth = {"Authorization": f"Bearer {token}"}
        print(f"read scenarios, load generator: {loadgen.generator()}", flush=True)
        item = "/default/api/bench/item"
        find_paths = [f"{item}/{i}" for i in ids]
        list_paths = [f"{item}?{LIST_QUERY}"]
        api_url = f"http://127.0.0.1:{api_port}"
        # every target gets the same request, token included (the floors ignore it)
        servers = {"floor": (base_port, baseline), "floor fifo": (fifo_port, fifo), "dap": (api_port, serve)}

        def target(port_: int, proc: subprocess.Popen[bytes], paths: list[str]) -> Callable[[], loadgen.Load]:
            return lambda: loadgen.load(
                f"http://127.0.0.1:{port_}",
                paths,
                seconds=args.seconds,
                headers=auth,
                connections=args.workers,
                warm=WARM_SECONDS,
                pids=[proc.pid],
            )

        results: dict[str, dict[str, loadgen.Figure]] = {}
        for scenario, paths in (("find", find_paths), ("list", list_paths)):
            print(f"running {scenario}: {args.rounds} rounds of {args.seconds}s per target ...", flush=True)
            targets = {name: target(port_, proc, paths) for name, (port_, proc) in servers.items()}
            results[scenario] = loadgen.interleave(targets, args.rounds)
        if args.profile:
            print(profiling.profile(serve.pid, api_url, find_paths, auth, args.seconds), flush=True)
        server_rss = rss_mib(serve.pid)
        baseline_rss = rss_mib(baseline.pid)
        cached_proc, cache_lines = await cache_scenario(tmp, dsn, (base_port, api_port), ids, auth, args)
        procs.append(cached_proc)
        document_lines, document_failures = [], 0
        if not args.reads:
            tokens = (bench_token("admin", ["admin"]), bench_token("u042", []))
            document_lines, document_failures = await semantics.documents_scenario(
                dsn, api_port, ids, args, tokens, WARM_SECONDS
            )

        print()
        print(
            f"REST benchmark: {args.rows} rows, {loadgen.generator()} with {args.workers} connections, "
            f"{args.rounds} interleaved rounds of {args.seconds}s per target (median, spread min-max), "
            f"pool size {POOL}, loopback, {os.cpu_count()} CPUs shared by generator, servers and Postgres"
        )
        for scenario, by_target in results.items():
            for target, figure in by_target.items():
                print(figure.line(f"{scenario} {target}"))
        find_ratio = loadgen.ratio(results["find"]["dap"], results["find"]["floor"])
        find_p99 = results["find"]["dap"].p99_ms / results["find"]["floor"].p99_ms
        list_ratio = loadgen.ratio(results["list"]["dap"], results["list"]["floor"])
        print(f"find-by-id throughput dap/floor:  {find_ratio} (target >= 0.90x)")
        print(f"find-by-id p99 dap/floor:         {find_p99:.2f}x")
        find_cpu = loadgen.cpu_ratio(results["find"]["dap"], results["find"]["floor"])
        print(f"find-by-id server CPU/request dap/floor: {find_cpu} (the steadiest figure)")
        fifo_ratio = loadgen.ratio(results["find"]["dap"], results["find"]["floor fifo"])
        fifo_cpu = loadgen.cpu_ratio(results["find"]["dap"], results["find"]["floor fifo"])
        print(f"find-by-id dap/floor fifo (callers in arrival order, as dap): {fifo_ratio}, CPU {fifo_cpu}")
        print(f"filtered sorted page dap/floor:   {list_ratio}  [{LIST_QUERY}]")
        print("\n".join(cache_lines))
        print(
            f"server RSS after the run: {server_rss:.1f} MiB (target < 150 MiB); "
            f"floor RSS {baseline_rss:.1f} MiB"
        )
        if boot_line:
            print(boot_line)
        print("\n".join(document_lines))
        failed = any(f.errors for by in results.values() for f in by.values()) or document_failures
        return 1 if failed else 0
    finally:
        clean_up(procs, server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per target and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the read scenarios")
    parser.add_argument("--reads", action="store_true", help="only the read scenarios (find, list, cache)")
    parser.add_argument("--profile", action="store_true", help="py-spy profile of dap serve under find-by-id")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--boot-only", action="store_true", help="measure only the 300-entity boot")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: prove the benchmark runs (make test)"
    )
    parsed = parser.parse_args()
    if parsed.quick:  # 2000 rows: enough drafts for the submits of the document scenario
        parsed.rows, parsed.seconds, parsed.workers, parsed.rounds = 2000, 0.2, 4, 1
        BOOT_ENTITIES, BOOT_ROUNDS, WARM_SECONDS, FIND_IDS = 10, 1, 0.05, 200
    sys.exit(asyncio.run(boot_only() if parsed.boot_only else main(parsed)))
