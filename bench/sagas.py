"""Benchmark of sagas (``make bench``; ``--quick`` for a few seconds).

1. A three-step saga (three HTTP steps to a target honouring ``Idempotency-Key``) against the same
   three calls made by hand, one after the other, by a client: p50 and p99 of each, sequential.
   The saga's latency is its job's ``finished_at - created_at`` (both Postgres clocks): from the
   transaction that queued it to the one that finished it, which includes the job worker's
   hand-over, the engine's claim and, per step, the ``sent`` commit, the call and the ``done``
   commit. Goal: <= 1.5x the hand-made calls. For scale, one committed INSERT of the same database.
2. Sagas per second with 1,000 in flight: 1,000 requested at once over REST (202 each), the time
   until every one completed.

The target is a child process (aiohttp on 127.0.0.1). Embedded Postgres in a temporary directory
unless ``DAP_BENCH_DSN`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import jwt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dap import config, embedded  # noqa: E402
from dap.server import catalog as catalogs  # noqa: E402
from dap.server import options  # noqa: E402
from dap.server.web import app as web_app  # noqa: E402

SECRET = "x" * 48
TARGET = """
import sys
from aiohttp import web
seen = {}
async def step(request):
    key = request.headers["Idempotency-Key"]
    await request.read()
    seen.setdefault(key, {"ok": True})
    return web.json_response(seen[key])
app = web.Application()
app.router.add_post("/{step}", step)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def spec_files(port: int) -> dict[str, str]:
    steps = "".join(
        f"\n          - {{name: {name}, http: {{url: 'http://127.0.0.1:{port}/{name}'}}, "
        f"compensation: {{http: {{url: 'http://127.0.0.1:{port}/{name}_undo'}}}}, timeout: 10s}}"
        for name in ("reserve", "charge", "notify")
    )
    return {
        "bench.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: bench}\n"
        "spec: {title: Bench}\n---\n"
        "apiVersion: dap.io/v1\nkind: Service\nmetadata: {name: flow, module: bench}\nspec:\n"
        "  expose: [{type: rest}]\n  actions:\n    - name: run\n      call: async\n      track: true\n"
        f"      impl:\n        type: saga\n        steps:{steps}\n"
    }


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(dsn: str, n: int, flight: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dap-bench-sagas-") as tmp:
        script = Path(tmp) / "target.py"
        script.write_text(TARGET)
        proc = subprocess.Popen([sys.executable, str(script), str(port)])  # noqa: ASYNC220
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(200):
                    try:
                        async with http.post(
                            f"http://127.0.0.1:{port}/warm", headers={"Idempotency-Key": "w"}
                        ):
                            break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
            opts = options.check(
                dsn=dsn,
                addr="127.0.0.1:0",
                metrics_addr="",
                jwt_secret=SECRET,
                cors_origins=["http://localhost"],
                pool_size=16,
            )
            catalog = catalogs.Catalog.from_spec(config.load_files(spec_files(port)))
            server = await web_app.create_server(opts, catalog)
            await server.start()
            try:
                await run(server, port, n, flight)
            finally:
                await server.stop()
        finally:
            proc.terminate()
            proc.wait(10)


async def run(server: web_app.Server, port: int, n: int, flight: int) -> None:
    now = int(time.time())
    token = jwt.encode(
        {
            "sub": "bench",
            "username": "bench",
            "roles": ["admin"],
            "iss": server.opts.jwt_issuer,
            "iat": now,
            "exp": now + 3600,
        },
        SECRET,
        algorithm="HS256",
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = f"{server.urls['api']}/default/api/bench/flow/run"
    pool = server.app[web_app.state.POOL]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http:
        # 1. the same three calls by hand
        hand: list[float] = []
        for i in range(n + 20):
            t = time.perf_counter()
            for name in ("reserve", "charge", "notify"):
                key = f"hand-{i}-{name}-{uuid.uuid4()}"
                async with http.post(
                    f"http://127.0.0.1:{port}/{name}", json={"params": {}}, headers={"Idempotency-Key": key}
                ) as r:
                    await r.read()
            if i >= 20:
                hand.append(time.perf_counter() - t)

        async def start() -> uuid.UUID:
            async with http.post(url, data="{}", headers=headers) as r:
                assert r.status == 202, await r.text()
                return uuid.UUID((await r.json())["data"]["id"])

        async def finished(ids: list[uuid.UUID]) -> None:
            while True:
                async with pool.acquire() as conn:
                    left = await conn.fetchval(
                        "SELECT count(*) FROM dap.jobs WHERE id = ANY($1) AND state <> 'succeeded'", ids
                    )
                if left == 0:
                    return
                await asyncio.sleep(0.02)  # the latency is read from Postgres: polling must not load the loop

        # for scale: one committed statement (WAL flushed) of the same database, sequentially
        commits: list[float] = []
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS public.bench_commits (id bigserial PRIMARY KEY)")
            for i in range(n + 20):
                t = time.perf_counter()
                await conn.execute("INSERT INTO public.bench_commits DEFAULT VALUES")
                if i >= 20:
                    commits.append(time.perf_counter() - t)

        # 2. the saga, sequentially
        ids = []
        for _ in range(n + 20):
            one = await start()
            await finished([one])
            ids.append(one)
        async with pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM finished_at - created_at) AS s FROM dap.jobs WHERE id = ANY($1)",
                ids[20:],
            )
        saga = [float(r["s"]) for r in rows]

        # 3. throughput with ``flight`` in flight
        t = time.perf_counter()
        many = await asyncio.gather(*(start() for _ in range(flight)))
        await finished(list(many))
        elapsed = time.perf_counter() - t

    print(f"a three-step saga vs the same three HTTP calls by hand ({n} sequential runs)")
    print(f"  hand-made 3 calls        p50 {pct(hand, 0.5):7.2f} ms  p99 {pct(hand, 0.99):7.2f} ms")
    print(f"  saga (queued->finished)  p50 {pct(saga, 0.5):7.2f} ms  p99 {pct(saga, 0.99):7.2f} ms")
    print(f"  ratio p50 {pct(saga, 0.5) / pct(hand, 0.5):.2f}x (goal <= 1.5x)")
    print(f"  for scale: one commit     p50 {pct(commits, 0.5):7.2f} ms  p99 {pct(commits, 0.99):7.2f} ms")
    print(f"{flight} sagas in flight: all completed in {elapsed:.2f} s, {flight / elapsed:.0f} sagas/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: prove it still runs")
    args = parser.parse_args()
    n, flight = (30, 100) if args.quick else (300, 1000)
    given = os.environ.get("DAP_BENCH_DSN")
    if given:
        asyncio.run(measure(given, n, flight))
        return
    with tempfile.TemporaryDirectory(prefix="dap-bench-pg-") as tmp:
        dsn, pg = embedded.start(Path(tmp) / "data")
        try:
            asyncio.run(measure(dsn, n, flight))
        finally:
            embedded.stop(pg, Path(tmp) / "data")


if __name__ == "__main__":
    main()
