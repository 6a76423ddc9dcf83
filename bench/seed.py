"""Seed loading speed: records/s of ``dap seed``'s loader against the REST create path, same run.

    .venv/bin/python bench/seed.py [--quick] [--records 10000] [--workers 8]

Each path gets a fresh database of the same Postgres, the procurement demo's schema and the same
rows: ``--records`` items of ``stock/item`` and a tenth as many purchase orders with two lines
each (references by natural key, derived line prices and totals, engine numbering; every fifth
order created submitted):

- ``seed``: the rows as YAML files, parsed (``workflows.seeds``) and loaded in one transaction
  (``workflows.seeding.load``) in this process, as ``dap seed`` does;
- ``rest``: the same records ``POST``-ed to a ``dap serve`` over loopback by ``--workers``
  concurrent clients (orders after items, their references as ids; ``?submit=true`` where the
  seed submits), every create its own transaction as an API client gets it;
- ``insert``: the items alone as one ``executemany`` INSERT in one transaction: the floor no rule
  runs on (no validation, no audit, no event), for scale.

Prints records/s of each path and the ratios ``seed / rest`` (the target: at least 1.0, a seed
of 10,000 records should not be slower than typing them through the API) and ``seed / insert``.
``--quick`` (``make bench-quick``) loads 200 records to prove the benchmark runs. Uses
``DAP_BENCH_DSN`` when set, else an embedded Postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import rest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dap.server import booting  # noqa: E402 -- after the path of a checkout
from dap.server.cli import load_catalog  # noqa: E402
from dap.server.storage import db, workspaces  # noqa: E402
from dap.server.workflows import seeding, seeds  # noqa: E402

SPEC = ROOT / "examples" / "procurement"
SUPPLIERS = (("NORTH-1", "north"), ("SOUTH-1", "south"))


def price(i: int) -> str:
    return f"{1 + i % 97}.25"


def yaml_files(items: int, orders: int) -> list[tuple[str, str]]:
    """The seed as files, as a person would write it."""
    lines = ["entity: stock/item", "records:"]
    lines += [f"  - {{code: I{i:06d}, title: Item {i}, unit_price: {price(i)}}}" for i in range(items)]
    suppliers = ["entity: buying/supplier", "records:"]
    suppliers += [
        f"  - {{code: {code}, name: Supplier {code}, region: {region}}}" for code, region in SUPPLIERS
    ]
    docs = ["entity: buying/purchase_order", "records:"]
    for i in range(orders):
        code, region = SUPPLIERS[i % 2]
        docs += [
            f"  - _key: o{i}",
            f"    supplier: {code}",
            "    order_date: today",
            f"    region: {region}",
            f"    lines: [{{item: I{i % items:06d}, qty: 2}}, {{item: I{(i * 7) % items:06d}, qty: 3}}]",
        ]
        if i % 5 == 0:
            docs.append("    _submit: true")
    return [
        ("10-items.yaml", "\n".join(lines) + "\n"),
        ("20-suppliers.yaml", "\n".join(suppliers) + "\n"),
        ("30-orders.yaml", "\n".join(docs) + "\n"),
    ]


async def prepared(server_dsn: str) -> str:
    dsn = await rest.new_database(server_dsn)
    pool = await db.open_pool(dsn, 2)
    try:
        await booting.prepare_database(pool, load_catalog(SPEC))
    finally:
        await pool.close()
    return dsn


async def seed_path(server_dsn: str, files: list[tuple[str, str]]) -> tuple[float, int]:
    dsn = await prepared(server_dsn)
    catalog = load_catalog(SPEC)
    pool = await db.open_pool(dsn, 1)
    try:
        async with pool.acquire() as conn:
            workspace = await workspaces.find(conn, "default")
            assert workspace is not None
            began = time.perf_counter()
            rows = seeds.parse_files(files)
            report = await seeding.load(conn, catalog, workspace.tenant_id, rows)
            took = time.perf_counter() - began
            again = await seeding.load(conn, catalog, workspace.tenant_id, rows)
            assert again.created == 0, again.summary()  # idempotent: a second run adds nothing
            assert again.unchanged == len(rows), again.summary()
    finally:
        await pool.close()
    return took, report.created


async def rest_path(server_dsn: str, items: int, orders: int, workers: int) -> tuple[float, int]:
    dsn = await prepared(server_dsn)
    port = rest.port()
    proc = rest.spawn_serve(SPEC, dsn, port)
    base = f"http://127.0.0.1:{port}/default/api"
    auth = rest.bench_token("bench", ["admin"])
    try:
        await rest.wait_http(f"http://127.0.0.1:{port}/default/_ui/_meta/apps")
        async with aiohttp.ClientSession() as http:

            async def post(path: str, body: dict[str, Any]) -> str:
                async with http.post(f"{base}/{path}", json=body, headers=auth) as resp:
                    answer = await resp.json()
                    assert resp.status == 201, answer
                    return str(answer["data"]["id"])

            async def run(jobs: list[tuple[str, dict[str, Any]]]) -> list[str]:
                out: list[str] = [""] * len(jobs)
                queue = list(enumerate(jobs))

                async def worker() -> None:
                    while queue:
                        i, (path, body) = queue.pop()
                        out[i] = await post(path, body)

                await asyncio.gather(*(worker() for _ in range(workers)))
                return out

            began = time.perf_counter()
            item_ids = await run(
                [
                    (
                        "stock/item",
                        {"code": f"I{i:06d}", "title": f"Item {i}", "unit_price": f"{1 + i % 97}.25"},
                    )
                    for i in range(items)
                ]
            )
            supplier_ids = await run(
                [("buying/supplier", {"code": c, "name": f"Supplier {c}", "region": r}) for c, r in SUPPLIERS]
            )
            today = dt.date.today().isoformat()
            await run(
                [
                    (
                        "buying/purchase_order" + ("?submit=true" if i % 5 == 0 else ""),
                        {
                            "supplier": supplier_ids[i % 2],
                            "order_date": today,
                            "region": SUPPLIERS[i % 2][1],
                            "lines": [
                                {"item": item_ids[i % items], "qty": "2"},
                                {"item": item_ids[(i * 7) % items], "qty": "3"},
                            ],
                        },
                    )
                    for i in range(orders)
                ]
            )
            took = time.perf_counter() - began
    finally:
        rest.stop(proc)
    return took, items + len(SUPPLIERS) + orders


async def insert_path(server_dsn: str, items: int) -> float:
    dsn = await prepared(server_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        records = [
            (tenant, uuid.uuid4(), f"I{i:06d}", f"Item {i}", Decimal(price(i)), "seed", "seed")
            for i in range(items)
        ]
        began = time.perf_counter()
        async with conn.transaction():
            await conn.executemany(
                'INSERT INTO "stock__item" (tenant_id, id, code, title, unit_price, created_by, owner) '
                "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                records,
            )
        return time.perf_counter() - began
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> int:
    records = 200 if args.quick else args.records
    orders = max(records // 11, 2)
    items = records - orders - len(SUPPLIERS)
    with tempfile.TemporaryDirectory(prefix="dap-bench-seed-") as tmp:
        server_dsn, server = rest.start_postgres(Path(tmp))
        try:
            files = yaml_files(items, orders)
            print(
                f"{items} items, {len(SUPPLIERS)} suppliers, {orders} orders (2 lines each) per path",
                flush=True,
            )
            seed_s, seeded = await seed_path(server_dsn, files)
            print(
                f"seed:   {seeded} records in {seed_s:.2f}s = {seeded / seed_s:,.0f} records/s "
                "(one transaction)"
            )
            rest_s, posted = await rest_path(server_dsn, items, orders, args.workers)
            print(
                f"rest:   {posted} records in {rest_s:.2f}s = {posted / rest_s:,.0f} records/s "
                f"({args.workers} concurrent clients, one transaction each)"
            )
            insert_s = await insert_path(server_dsn, items)
            print(f"insert: {items} items in {insert_s:.2f}s = {items / insert_s:,.0f} records/s (no rules)")
            print(f"ratio seed/rest   = {(seeded / seed_s) / (posted / rest_s):.2f}  (target >= 1.0)")
            print(f"ratio seed/insert = {(seeded / seed_s) / (items / insert_s):.3f}")
        finally:
            rest.clean_up([], server)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 records: prove it runs")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    sys.exit(asyncio.run(main(parser.parse_args())))
