"""Benchmark of the app-process bridge (``make bench``; ``--quick`` for a few seconds).

1. Invoke of an empty handler over a unix socket, through the bridge's client (scope opened and
   closed, ids and /ctx URL sent, the answer parsed), p50 and p99, against a bare aiohttp POST of
   the same body to the same app over the same socket, measured in this run. Target p99 <= 2 ms.
2. ``/ctx entity/get`` inside a live scope (the scope's own transaction connection, a savepoint,
   the record presented as JSON) against the same row read directly with asyncpg: the overhead of
   the primitive at p50. Target <= 1 ms.

The app process is ``examples/bridge/python/svc_app.py`` with one empty handler, in a child process.
Embedded Postgres in a temporary directory unless ``DAP_BENCH_DSN`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dap import config, embedded  # noqa: E402
from dap.bridge import hosting, wire  # noqa: E402
from dap.server import catalog as catalogs  # noqa: E402
from dap.server import options  # noqa: E402
from dap.server.web import app as web_app  # noqa: E402
from dap.server.workflows import sidecars  # noqa: E402

APP = f"""
import sys
sys.path.insert(0, {str(ROOT / "examples" / "bridge" / "python")!r})
import svc_app
async def noop(ctx, request):
    return {{}}
svc_app.serve({{"store/item/noop": noop}}, sys.argv[1])
"""
SPEC = ROOT / "tests" / "bridge" / "spec"


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure(dsn: str, n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dap-bench-bridge-") as tmp:
        sock = Path(tmp) / "app.sock"
        script = Path(tmp) / "app.py"
        script.write_text(APP)
        proc = subprocess.Popen([sys.executable, str(script), f"unix://{sock}"])  # noqa: ASYNC220
        try:
            for _ in range(200):
                if sock.exists():
                    break
                await asyncio.sleep(0.05)
            opts = options.check(
                dsn=dsn,
                addr="127.0.0.1:0",
                metrics_addr="",
                jwt_secret="x" * 48,
                cors_origins=["http://localhost"],
                spec=str(SPEC),
                sidecar_endpoint=f"unix://{sock}",
            )
            server = await web_app.create_server(opts, catalogs.Catalog.from_spec(config.load_spec(SPEC)))
            bridge = hosting.attach(server.app, opts, state_dir=Path(tmp) / "ds")
            assert bridge is not None
            await server.start()
            try:
                await run(server, bridge, sock, n)
            finally:
                await server.stop()
        finally:
            proc.terminate()
            proc.wait(10)


async def run(server: web_app.Server, bridge: hosting.Bridge, sock: Path, n: int) -> None:
    pool = server.app[web_app.state.POOL]
    tenant = uuid.uuid4()
    rid = uuid.uuid4()
    resource = server.app[web_app.state.SPEC].current.resources["store/item"]
    async with pool.acquire() as conn:
        await conn.execute(
            f'INSERT INTO "{resource.table.name}" (tenant_id, id, sku, stock, created_by, owner) '
            "VALUES ($1, $2, 'bench', 5, 'b', 'b')",
            tenant,
            rid,
        )
    body = {"resource_id": str(rid), "resource": {"sku": "bench"}, "params": {}}

    # 1. bare aiohttp round trip vs the bridge's invoke
    bare: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as http:
        for i in range(n + 50):
            t = time.perf_counter()
            url = "http://app" + wire.invoke_path("store/item", "noop")
            async with http.post(url, json=body, headers={wire.CTX_URL: bridge.ctx_url}) as r:
                await r.read()
            if i >= 50:
                bare.append(time.perf_counter() - t)
    invoked: list[float] = []
    async with pool.acquire() as conn, conn.transaction():
        call = sidecars.Invocation(
            conn=conn,
            tenant=tenant,
            principal="b",
            username="b",
            entity="store/item",
            action="noop",
            record_id=rid,
            resource={"sku": "bench"},
        )
        for i in range(n + 50):
            t = time.perf_counter()
            await bridge.invoke(call)
            if i >= 50:
                invoked.append(time.perf_counter() - t)

    # 2. /ctx entity/get in a live scope vs asyncpg directly
    direct: list[float] = []
    via: list[float] = []
    async with pool.acquire() as conn, conn.transaction():
        statement = f'SELECT * FROM "{resource.table.name}" WHERE tenant_id = $1 AND id = $2'
        for i in range(n + 50):
            t = time.perf_counter()
            await conn.fetchrow(statement, tenant, rid)
            if i >= 50:
                direct.append(time.perf_counter() - t)
        scope = bridge.scopes.open(
            conn, tenant=tenant, principal="b", username="b", entity="store/item", action="x", timeout=600
        )
        headers = {wire.SCOPE: scope.id}
        get = {"named": "store/item", "key": str(rid)}
        async with aiohttp.ClientSession() as http:
            for i in range(n + 50):
                t = time.perf_counter()
                async with http.post(f"{bridge.ctx_url}/ctx/entity/get", json=get, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                if i >= 50:
                    via.append(time.perf_counter() - t)
        await bridge.scopes.close(scope)

    def line(name: str, xs: list[float]) -> str:
        return (
            f"  {name:<34} p50 {pct(xs, 0.5):6.3f} ms  p99 {pct(xs, 0.99):6.3f} ms  "
            f"{len(xs) / sum(xs):8.0f}/s"
        )

    print(f"invoke of an empty handler over a unix socket ({n} sequential calls)")
    print(line("bare aiohttp POST (baseline)", bare))
    print(line("bridge invoke (scope, headers)", invoked))
    print(
        f"  ratio p50 {pct(invoked, 0.5) / pct(bare, 0.5):.2f}x of the baseline; "
        f"p99 {pct(invoked, 0.99):.3f} ms (target <= 2 ms)"
    )
    print(f"/ctx entity/get in a scope ({n} sequential calls)")
    print(line("asyncpg fetchrow (baseline)", direct))
    print(line("/ctx entity/get", via))
    overhead = statistics.median(via) * 1000 - statistics.median(direct) * 1000
    print(f"  overhead at p50 {overhead:.3f} ms (target <= 1 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: prove it still runs")
    args = parser.parse_args()
    n = 300 if args.quick else 3000
    given = os.environ.get("DAP_BENCH_DSN")
    if given:
        asyncio.run(measure(given, n))
        return
    with tempfile.TemporaryDirectory(prefix="dap-bench-pg-") as tmp:
        dsn, pg = embedded.start(Path(tmp) / "data")
        try:
            asyncio.run(measure(dsn, n))
        finally:
            embedded.stop(pg, Path(tmp) / "data")


if __name__ == "__main__":
    main()
