"""REST benchmark: ``dap serve`` against a minimal aiohttp + asyncpg handler, in the same run.

    .venv/bin/python bench/rest.py [--rows 100000] [--seconds 8] [--workers 32] [--boot-only] [--quick]

Steps: start an embedded Postgres (or use ``DAP_BENCH_DSN``), load ``--rows`` rows into one
workspace, spawn ``dap serve`` and a baseline server (same pool size, the same SQL the engine
builds, ``json.dumps`` of the rows, no auth, no validation), and drive both over loopback with a
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
import jwt
import loadgen

ROOT = Path(__file__).resolve().parent.parent
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
BUYERS = 100  # bench/doc rows are spread over this many buyers, each seeing 1/BUYERS of them


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


# --- baseline server (run in a child process) ------------------------------------------------
# The floor runs on the event loop and with the JSON encoder that ``dap serve`` uses, so that the
# ratio measures dap's own work and nothing a library choice would give either side.


def _floor_dumps(value: Any) -> bytes:
    import orjson

    from dap.server.storage import db

    return orjson.dumps(value, default=db.json_default)


FLOOR_DUMPS = _floor_dumps


def FLOOR_LOOP() -> asyncio.AbstractEventLoop:  # noqa: N802 -- the loop dap serve runs on
    from dap.server import loops

    return loops.factory()()


def baseline_main(port_: int, dsn: str, tenant: str, fifo: bool = False) -> None:
    """The floor; ``fifo`` puts dap's first-come, first-served gate (``storage.gates``) in front of
    its pool, as ``db.connection`` does: the floor that also serves its callers in arrival order."""
    import contextlib

    from aiohttp import web

    from dap import config
    from dap.server.catalog import Catalog
    from dap.server.storage import db, gates, sql
    from dap.server.workflows import filters

    catalog = Catalog.from_spec(config.load_files({"spec.yaml": SPEC}))
    resource = catalog.resources["bench/item"]
    tenant_id = uuid.UUID(tenant)
    pairs = [tuple(p.split("=", 1)) for p in LIST_QUERY.split("&")]
    list_sql, list_args = sql.select_list(resource.table, filters.parse(resource, pairs), tenant_id, None)  # type: ignore[arg-type]
    one_sql, _ = sql.select_one(resource.table, tenant_id, uuid.uuid4())

    dumps = FLOOR_DUMPS
    gate: Any = gates.Gate(POOL) if fifo else contextlib.nullcontext()

    async def find(request: web.Request) -> web.Response:
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(one_sql, tenant_id, uuid.UUID(request.match_info["id"]))
        return web.Response(body=dumps({"data": dict(row)}), content_type="application/json")

    async def many(request: web.Request) -> web.Response:
        async with gate, request.app["pool"].acquire() as conn:
            rows = await conn.fetch(list_sql, *list_args)
        body = {"data": [dict(r) for r in rows], "limit": 50, "offset": 0, "total": None}
        return web.Response(body=dumps(body), content_type="application/json")

    # the floor's writes: dap's own INSERT/UPDATE … RETURNING, one autocommitted statement each
    # (no transaction around it, no event, no audit: what a hand-written endpoint would send)
    def columns_of(body: dict[str, Any]) -> dict[str, Any]:
        out = {k: body[k] for k in ("code", "title", "qty", "category") if k in body}
        if "price" in body:
            out["price"] = Decimal(str(body["price"]))
        return out

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        statement, args = sql.insert(resource.table, tenant_id, columns_of(body), owner="alice")
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(statement, *args)
        return web.Response(status=201, body=dumps({"data": dict(row)}), content_type="application/json")

    async def update(request: web.Request) -> web.Response:
        body = await request.json()
        record_id = uuid.UUID(request.match_info["id"])
        statement, args = sql.update(
            resource.table, tenant_id, record_id, columns_of(body), expected_version=None
        )
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(statement, *args)
        if row is None:
            raise web.HTTPNotFound()
        return web.Response(body=dumps({"data": dict(row)}), content_type="application/json")

    async def make() -> web.Application:
        app = web.Application()
        # the pool's reset as dap's (see storage.db.keep_session): the ratio is dap's own work
        app["pool"] = await asyncpg.create_pool(dsn, min_size=2, max_size=POOL, reset=db.keep_session)
        app.router.add_get("/default/api/bench/item", many)
        app.router.add_get("/default/api/bench/item/{id}", find)
        app.router.add_post("/default/api/bench/item", create)
        app.router.add_patch("/default/api/bench/item/{id}", update)
        return app

    web.run_app(make(), host="127.0.0.1", port=port_, access_log=None, print=None, loop=FLOOR_LOOP())


# --- load generator ----------------------------------------------------------------------------


def summary(runs: list[tuple[list[float], float, int]]) -> dict[str, float]:
    """Requests/s, p50, p99 and errors over several runs of ``drive``."""
    latencies = sorted(x for lat, _, _ in runs for x in lat)
    elapsed = sum(e for _, e, _ in runs)
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "errors": sum(n for _, _, n in runs),
    }


Request = str | tuple[str, str, Any]  # a GET url, or (method, url, JSON body)


async def drive(
    url_of: Any, *, seconds: float, workers: int, headers: dict[str, str], warm: bool = True
) -> tuple[list[float], float, int]:
    """Run ``workers`` clients for ``seconds``; ``url_of()`` gives each next :data:`Request`."""
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:

        async def send() -> int:
            request: Request = url_of()
            method, url, body = ("GET", request, None) if isinstance(request, str) else request
            async with http.request(method, url, json=body) as resp:
                await resp.read()
                return resp.status

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                if await send() not in (200, 201):
                    errors += 1
                latencies.append(time.perf_counter() - started)

        warm_until = time.perf_counter() + (WARM_SECONDS if warm else 0.0)
        while time.perf_counter() < warm_until:  # warm-up: pools, prepared statements
            await send()
        stop_at = time.perf_counter() + seconds
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.perf_counter() - began
    return latencies, elapsed, errors


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
    port_: int, dsn: str, tenant: str, log: Path | None = None, *, fifo: bool = False
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, "--baseline-fifo" if fifo else "--baseline", str(port_), dsn, tenant],
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


def big_spec(directory: Path, entities: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    docs = ["apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: big}\nspec: {title: Big}\n"]
    for i in range(entities):
        docs.append(f"""apiVersion: dap.io/v1
kind: Entity
metadata: {{name: e{i:03d}, module: big}}
spec:
  fields:
    - {{name: code, type: string, unique: true}}
    - {{name: title, type: string}}
    - {{name: amount, type: money}}
    - {{name: qty, type: integer}}
    - {{name: day, type: date}}
    - {{name: owner_ref, type: relation, relation: {{entity: big/e000}}}}
  expose:
    - type: rest
""")
    (directory / "big.yaml").write_text("---\n".join(docs))


async def ddl_seconds(server_dsn: str, spec_dir: Path) -> float:
    """Time Postgres needs to create the spec's tables and indexes from plain DDL, once."""
    from dap import config
    from dap.server.catalog import Catalog
    from dap.server.storage import migrations

    catalog = Catalog.from_spec(config.load_spec(spec_dir))
    plan = migrations.plan({}, catalog.tables, catalog.entities)
    dsn = await new_database(server_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        async with conn.transaction():
            for step in plan.steps:
                for statement in step.statements:
                    await conn.execute(statement)
        return time.perf_counter() - started
    finally:
        await conn.close()


# --- document semantics: lifecycle moves and row scope on bench/doc --------------------------


async def load_docs(dsn: str, rows: int) -> list[str]:
    """``rows`` draft documents spread over ``BUYERS`` buyers; returns every id, shuffled."""
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        records = [
            (tenant, uuid.uuid4(), f"D{i:07d}", i % 500, f"u{i % BUYERS:03d}", "bench", "bench")
            for i in range(rows)
        ]
        await conn.copy_records_to_table(
            "bench__doc",
            records=records,
            columns=["tenant_id", "id", "code", "qty", "buyer", "created_by", "owner"],
        )
        await conn.execute("ANALYZE bench__doc")
    finally:
        await conn.close()
    ids = [str(r[1]) for r in records]
    random.Random(11).shuffle(ids)
    return ids


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


async def documents_scenario(
    dsn: str, api_port: int, item_ids: list[str], args: argparse.Namespace
) -> tuple[list[str], int]:
    """Update of a draft, submit, and a list under row scope, each against its plain counterpart.

    Plain update is a PATCH of ``bench/item`` (no lifecycle); the draft update PATCHes a
    ``bench/doc`` draft (lifecycle check on the locked row); submit moves a draft (each id once).
    The plain list is admin (row scope lifted by ``all_rows``) asking for one buyer's documents
    with a filter (``buyer=u042``); the scoped list is that buyer asking without the filter, so
    the row scope (``buyer = username``) puts the same condition into the statement: the ratio
    is the cost of resolving and applying the scope, on the same rows and plan.
    Pairs run A B B A, each half of ``--seconds``.
    """
    print(f"loading {args.rows} draft documents ...", flush=True)
    doc_ids = await load_docs(dsn, args.rows)
    admin = bench_token("admin", ["admin"])
    buyer = bench_token("u042", [])
    base = f"http://127.0.0.1:{api_port}/default/api/bench"
    counter = iter(range(10**9))
    drafts = iter(doc_ids[: len(doc_ids) // 2])  # submitted ones, never updated afterwards
    editable = doc_ids[len(doc_ids) // 2 :]
    list_query = "sort=-created_at&limit=50"

    def plain_update() -> Request:
        return ("PATCH", f"{base}/item/{random.choice(item_ids)}", {"qty": next(counter) % 500})

    def draft_update() -> Request:
        return ("PATCH", f"{base}/doc/{random.choice(editable)}", {"qty": next(counter) % 500})

    def submit() -> Request:
        return ("POST", f"{base}/doc/{next(drafts)}/submit", None)

    def filtered_list() -> Request:  # the scope's condition sent as a plain filter, by admin
        return f"{base}/doc?buyer=u042&{list_query}"

    def scoped_list() -> Request:  # the same rows, selected by the buyer's row scope
        return f"{base}/doc?{list_query}"

    pairs = {
        "update of a draft / plain update": ((plain_update, admin), (draft_update, admin)),
        "submit / plain update": ((plain_update, admin), (submit, admin)),
        "list under row scope / plain list": ((filtered_list, admin), (scoped_list, buyer)),
    }
    failures = 0
    lines = [
        "",
        f"document semantics ({args.rows} rows each in bench/item and bench/doc, {args.workers} clients):",
    ]
    for title, (plain, measured) in pairs.items():
        runs: dict[str, list[tuple[list[float], float, int]]] = {"plain": [], "measured": []}
        for side, (request_of, headers) in (
            ("plain", plain),
            ("measured", measured),
            ("measured", measured),
            ("plain", plain),
        ):
            print(f"running {title}: {side} ...", flush=True)
            runs[side].append(
                await drive(request_of, seconds=args.seconds / 2, workers=args.workers, headers=headers)
            )
        got = {side: summary(r) for side, r in runs.items()}
        ratio = got["measured"]["rps"] / got["plain"]["rps"]
        failures += int(got["measured"]["errors"] + got["plain"]["errors"])
        measured, plain_ = got["measured"], got["plain"]
        lines.append(
            f"  {title:<34} {measured['rps']:>7.0f} vs {plain_['rps']:>7.0f} req/s = {ratio:.2f}x "
            f"(target >= 0.70x); p99 {measured['p99_ms']:.1f} vs {plain_['p99_ms']:.1f} ms; "
            f"errors {measured['errors'] + plain_['errors']:.0f}"
        )
    return lines, failures


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
    big_spec(big, BOOT_ENTITIES)
    boots: list[float] = []
    reboots: list[float] = []
    ddls: list[float] = []
    for _ in range(BOOT_ROUNDS):
        big_dsn = await new_database(server_dsn)
        for into in (boots, reboots):
            big_port = port()
            started = time.perf_counter()
            proc = spawn_serve(big, big_dsn, big_port)
            procs.append(proc)
            await wait_http(f"http://127.0.0.1:{big_port}/default/_ui/_meta/apps")
            into.append(time.perf_counter() - started)
            stop(proc)
        ddls.append(await ddl_seconds(server_dsn, big))
    boot, reboot, ddl = (sorted(x)[len(x) // 2] for x in (boots, reboots, ddls))
    rounds = ", ".join(f"{b:.2f}/{d:.2f}" for b, d in zip(boots, ddls, strict=True))
    return (
        f"boot with {BOOT_ENTITIES} entities to first answered request (median of {BOOT_ROUNDS}): "
        f"{boot:.2f}s creating the tables, "
        f"{reboot:.2f}s when they exist; Postgres creating the same tables once: {ddl:.2f}s, twice: "
        f"{2 * ddl:.2f}s; boot/(2 x DDL) = {boot / (2 * ddl):.2f} (rounds boot/DDL: {rounds})"
    )


def profile(pid: int, base: str, paths: list[str], auth: dict[str, str], seconds: float) -> str:
    """Where ``dap serve`` spends its time on find-by-id under load: py-spy samples the process
    while ``wrk`` drives it; the top functions by own time and by time including callees."""
    import shutil
    import threading
    from collections import Counter

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return "profile: py-spy not installed (pip install py-spy)"
    out = Path(tempfile.mkdtemp(prefix="dap-prof-")) / "stacks.txt"
    spy_seconds = max(2, int(seconds))
    record = subprocess.Popen(
        [spy, "record", "-p", str(pid), "-d", str(spy_seconds), "-r", "250", "-f", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = threading.Thread(
        target=loadgen.load,
        args=(base, paths),
        kwargs={"seconds": spy_seconds + 1, "headers": auth, "warm": 0},
    )
    driver.start()
    record.wait()
    driver.join()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] for f in stack.split(";")
        ]
        n = int(count)
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"profile of dap serve under find-by-id ({samples} samples, py-spy):", "  own time:"]
    lines += [f"    {100 * n / samples:5.1f}%  {name})" for name, n in own.most_common(45)]
    lines.append("  including callees:")
    lines += [f"    {100 * n / samples:5.1f}%  {name})" for name, n in total.most_common(80)]
    return "\n".join(lines)


def start_postgres(tmp: Path) -> tuple[str, Any]:
    """``DAP_BENCH_DSN``, or an embedded Postgres under ``tmp`` (its handle to clean up)."""
    server_dsn = os.environ.get("DAP_BENCH_DSN")
    if server_dsn:
        return server_dsn, None
    from dap import embedded

    print("starting embedded Postgres ...", flush=True)
    return embedded.start(tmp / "pg")


def clean_up(procs: list[subprocess.Popen[bytes]], server: Any) -> None:
    for proc in procs:
        if proc.poll() is None:
            stop(proc)
    if server is not None:
        server.cleanup()


async def boot_only() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-"))
    server_dsn, server = start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        print(await boot_figures(server_dsn, tmp, procs))
        return 0
    finally:
        clean_up(procs, server)


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
            print(profile(serve.pid, api_url, find_paths, auth, args.seconds), flush=True)
        server_rss = rss_mib(serve.pid)
        baseline_rss = rss_mib(baseline.pid)
        cached_proc, cache_lines = await cache_scenario(tmp, dsn, (base_port, api_port), ids, auth, args)
        procs.append(cached_proc)
        document_lines, document_failures = [], 0
        if not args.reads:
            document_lines, document_failures = await documents_scenario(dsn, api_port, ids, args)

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
        clean_up(procs, server)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--baseline", "--baseline-fifo"):
        baseline_main(int(sys.argv[2]), sys.argv[3], sys.argv[4], fifo=sys.argv[1] == "--baseline-fifo")
        sys.exit(0)
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
