"""gRPC benchmark: find-by-id over gRPC against REST, and a bare grpcio floor, in the same run.

    .venv/bin/python bench/rpc.py [--rows 20000] [--seconds 5] [--rounds 3] [--workers 32] [--quick]

(Named ``rpc.py``, not ``grpc.py``: a script run from ``bench/`` would shadow the ``grpc`` package.)

Steps: an embedded Postgres (or ``DAP_BENCH_DSN``), ``--rows`` rows of ``bench/item``
(``bench/rest.py``'s loader), one ``dap serve`` answering REST and ``--grpc-addr`` (the same
process, pool and cache), and a floor: a bare ``grpc.aio`` handler in its own process running the
same SQL (``sql.select_one``) on a pool of the same size and filling the same message by hand -- no
token, no permission, no row scope. Every target is driven by ``--workers`` concurrent unary
callers from this process (``aiohttp`` for REST, one ``grpc.aio`` channel for gRPC: Python
clients on both sides, so the client's cost weighs alike), in interleaved rounds that rotate who
goes first. Prints requests/s, p50 and p99 per target (median of the rounds) and the ratios.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rest

SPEC = rest.SPEC.replace(
    "  expose:\n    - type: rest\n---", "  expose:\n    - type: rest\n    - type: grpc\n---", 1
)
SERVICE = "/dap.bench.v1.ItemService/Get"


def classes() -> tuple[Any, Any]:
    """GetItemRequest and Item, from the descriptors ``dap serve`` builds for the same spec."""
    from google.protobuf import message_factory

    from dap import config
    from dap.server.catalog import Catalog
    from dap.server.rpc import descriptors, server

    catalog = Catalog.from_spec(config.load_files({"spec.yaml": SPEC}))
    pool = server.pool_of(descriptors.files(catalog))

    def get(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return get("dap.bench.v1.GetItemRequest"), get("dap.bench.v1.Item")


# --- the floor (run in a child process) ---------------------------------------------------------


def floor_main(port_: int, dsn: str, tenant: str) -> None:
    import asyncpg

    from dap import config
    from dap.server import loops
    from dap.server.catalog import Catalog
    from dap.server.storage import db, sql

    request_class, item_class = classes()
    catalog = Catalog.from_spec(config.load_files({"spec.yaml": SPEC}))
    resource = catalog.resources["bench/item"]
    tenant_id = uuid.UUID(tenant)
    one_sql, _ = sql.select_one(resource.table, tenant_id, uuid.uuid4())

    async def serve() -> None:
        pool = await asyncpg.create_pool(dsn, min_size=2, max_size=rest.POOL, reset=db.keep_session)

        async def get(request: Any, context: Any) -> Any:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(one_sql, tenant_id, uuid.UUID(request.id))
            return item_class(
                id=str(row["id"]),
                version=row["version"],
                created_at=row["created_at"].isoformat(),
                updated_at=row["updated_at"].isoformat(),
                owner=row["owner"],
                code=row["code"],
                title=row["title"],
                price=str(row["price"]),
                qty=row["qty"],
                category=row["category"],
            )

        handler = grpc.unary_unary_rpc_method_handler(
            get,
            request_deserializer=request_class.FromString,
            response_serializer=item_class.SerializeToString,
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("dap.bench.v1.ItemService", {"Get": handler})]
        )
        server.add_insecure_port(f"127.0.0.1:{port_}")
        await server.start()
        await server.wait_for_termination()

    loops.run(serve())


# --- drivers --------------------------------------------------------------------------------------

Call = Callable[[str], Awaitable[bool]]


async def drive(call: Call, ids: list[str], *, seconds: float, workers: int) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    for i in ids[:50]:  # warm-up: pools, prepared statements, the channel
        await call(i)
    stop_at = time.perf_counter() + seconds

    async def worker(n: int) -> None:
        nonlocal errors
        k = n
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            if not await call(ids[k % len(ids)]):
                errors += 1
            latencies.append(time.perf_counter() - started)
            k += workers

    began = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(workers)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "errors": errors,
    }


async def wait_grpc(port_: int, limit: float = 60.0) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_}") as channel:
        await asyncio.wait_for(channel.channel_ready(), limit)


def spawn_serve(spec: Path, dsn: str, api_port: int, grpc_port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update(
        {
            "DAP_DSN": dsn,
            "DAP_JWT_SECRET": rest.SECRET,
            "DAP_CORS_ORIGIN": "http://localhost:3000",
            "DAP_LOG_LEVEL": "warn",
            "DAP_POOL_SIZE": str(rest.POOL),
        }
    )
    return subprocess.Popen(
        [
            *(rest.DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{api_port}"),
            *("--metrics-addr", "", "--grpc-addr", f"127.0.0.1:{grpc_port}"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def spawn_floor(port_: int, dsn: str, tenant: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--floor", str(port_), dsn, tenant])


async def main(args: argparse.Namespace) -> int:
    rest.FIND_IDS = min(rest.FIND_IDS, args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-grpc-"))
    server_dsn, pg = rest.start_postgres(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        dsn = await rest.new_database(server_dsn)
        spec = tmp / "spec"
        spec.mkdir()
        (spec / "bench.yaml").write_text(SPEC)
        api_port, grpc_port, floor_port = rest.port(), rest.port(), rest.port()
        procs.append(spawn_serve(spec, dsn, api_port, grpc_port))
        await rest.wait_http(f"http://127.0.0.1:{api_port}/default/_ui/_meta/apps")
        print(f"loading {args.rows} rows ...", flush=True)
        tenant, ids = await rest.load_rows(dsn, args.rows)
        procs.append(spawn_floor(floor_port, dsn, tenant))
        await wait_grpc(grpc_port)
        await wait_grpc(floor_port)
        now = int(time.time())
        token = jwt.encode(
            {"sub": "u", "username": "alice", "iss": "svc", "iat": now, "exp": now + 3600},
            rest.SECRET,
            algorithm="HS256",
        )
        request_class, item_class = classes()
        metadata = (("authorization", f"Bearer {token}"), ("dap-workspace", "default"))
        connector = aiohttp.TCPConnector(limit=args.workers)
        async with (
            aiohttp.ClientSession(connector=connector, headers={"Authorization": f"Bearer {token}"}) as http,
            grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as dap_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{floor_port}") as floor_channel,
        ):
            item = f"http://127.0.0.1:{api_port}/default/api/bench/item/"

            async def rest_find(record_id: str) -> bool:
                async with http.get(item + record_id) as resp:
                    await resp.read()
                    return resp.status == 200

            def grpc_find(channel: grpc.aio.Channel) -> Call:
                method = channel.unary_unary(
                    SERVICE,
                    request_serializer=request_class.SerializeToString,
                    response_deserializer=item_class.FromString,
                )

                async def call(record_id: str) -> bool:
                    try:
                        answer = await method(request_class(id=record_id), metadata=metadata)
                    except grpc.aio.AioRpcError:
                        return False
                    return bool(answer.id == record_id)

                return call

            targets: dict[str, Call] = {
                "grpc floor": grpc_find(floor_channel),
                "dap gRPC": grpc_find(dap_channel),
                "dap REST": rest_find,
            }
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            names = list(targets)
            for r in range(args.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    runs[name].append(
                        await drive(targets[name], ids, seconds=args.seconds, workers=args.workers)
                    )
                    last = runs[name][-1]
                    print(f"  round {r + 1} {name:<11} {last['rps']:8.0f} req/s", flush=True)
        print()
        print(
            f"gRPC benchmark, find by id: {args.rows} rows, {args.workers} concurrent unary callers "
            f"(Python clients), {args.rounds} interleaved rounds of {args.seconds}s (median)"
        )
        med: dict[str, float] = {}
        for name, figures in runs.items():
            med[name] = statistics.median(f["rps"] for f in figures)
            p50 = statistics.median(f["p50_ms"] for f in figures)
            p99 = statistics.median(f["p99_ms"] for f in figures)
            errs = sum(int(f["errors"]) for f in figures)
            print(f"  {name:<11} {med[name]:8.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  errors {errs}")
        print(f"  dap gRPC / dap REST   {med['dap gRPC'] / med['dap REST']:.2f}")
        print(f"  dap gRPC / grpc floor {med['dap gRPC'] / med['grpc floor']:.2f}")
        failed = sum(int(f["errors"]) for figures in runs.values() for f in figures)
        return 1 if failed else 0
    finally:
        rest.clean_up(procs, pg, tmp)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--floor":
        floor_main(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        sys.exit(0)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="small and short: proves the benchmark runs")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.rows, arguments.seconds, arguments.rounds = 2000, 1.0, 1
    sys.exit(asyncio.run(main(arguments)))
