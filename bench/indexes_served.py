"""Creates/s of an order through a real ``dap serve``, with the derived indexes and without (issue 48).

``bench/indexes.py`` measures what the orders' derived indexes cost an insert (the bare statement)
and dap's create (``operations.create``, no HTTP); this part measures what a user sees end to end:
one ``dap serve`` of ``examples/procurement`` on its own database, its orders table prefilled for
the default workspace, ``workers`` clients each ``POST``-ing orders over REST for ``seconds``, in
rounds A B B A between the indexes as booted (derived) and the indexes from before the derivation
(the derived ones dropped by name, the ones of before built; put back for the next derived round).
Each switch is followed by ``ANALYZE`` and a short warm-up that is not counted.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import rest

from dap.server.storage.tables import Index, Table, quote


async def _posts(base: str, body: dict[str, Any], seconds: float, workers: int) -> float:
    """Creates/s of ``workers`` clients posting ``body`` for ``seconds``; every answer must be 201."""
    headers = rest.bench_token("bench", ["admin"])
    stop = time.perf_counter() + seconds
    done = 0

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            async with http.post(
                f"{base}/default/api/buying/purchase_order", json=body, headers=headers
            ) as r:
                text = await r.read()
                assert r.status == 201, (r.status, text[:300])
            done += 1

    async with aiohttp.ClientSession() as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(workers)))
        return done / (time.perf_counter() - started)


async def _switch(dsn: str, table: str, drop: list[str], build: list[Index]) -> int:
    """Drop ``drop``, build ``build`` on ``table``; how many indexes it has then."""
    conn = await rest.asyncpg.connect(dsn)
    try:
        for name in drop:
            await conn.execute(f"DROP INDEX IF EXISTS {quote(name)}")
        for index in build:
            await conn.execute(index.ddl(table))
        await conn.execute(f"ANALYZE {quote(table)}")
        count: int = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = $1", table)
    finally:
        await conn.close()
    return count


async def served(
    server_dsn: str,
    spec: Path,
    catalog: Any,
    plain: tuple[Index, ...],
    fill_statement: Any,
    prefill: int,
    seconds: float,
    workers: int,
    rounds: int,
) -> list[str]:
    """The figure (lines to print); see the module's docstring."""
    po: Table = catalog.resource("buying", "purchase_order").table
    supplier = next(t for t in catalog.tables if t.entity == "buying/supplier" and t.kind == "entity")
    derived = [d.index for d in catalog.indexes.indexes if d.table == po.name and d.origin == "derived"]
    kept = {d.index.name for d in catalog.indexes.indexes if d.table == po.name}
    before_only = [i for i in plain if i.name not in kept]
    dsn = await rest.new_database(server_dsn)
    port = rest.port()
    proc = rest.spawn_serve(spec, dsn, port)
    base = f"http://127.0.0.1:{port}"
    try:
        await rest.wait_http(f"{base}/default/_ui/_meta/apps")
        conn = await rest.asyncpg.connect(dsn)
        try:
            tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
            await conn.execute(fill_statement(supplier), tenant, 1, 1)
            await conn.execute(fill_statement(po), tenant, 1, prefill)
            found = await conn.fetchrow(f"SELECT id, region FROM {quote(supplier.name)} LIMIT 1")
        finally:
            await conn.close()
        body = {
            "supplier": str(found["id"]),
            "order_date": "2026-11-28",
            "region": found["region"],
            "buyer": "bench",
        }
        sets = {
            "derived": ([i.name for i in before_only], derived),
            "before": ([i.name for i in derived], before_only),
        }
        rates: dict[str, list[float]] = {"derived": [], "before": []}
        counts: dict[str, int] = {}
        for r in range(rounds):
            for label in ("derived", "before")[:: -1 if r % 2 else 1]:  # A B B A
                counts[label] = await _switch(dsn, po.name, *sets[label])
                await _posts(base, body, min(1.0, seconds / 4), workers)  # warm-up, not counted
                rates[label].append(await _posts(base, body, seconds, workers))
    finally:
        rest.stop(proc)
    ratio = statistics.median(rates["derived"]) / statistics.median(rates["before"])
    per_round = sorted(d / b for d, b in zip(rates["derived"], rates["before"], strict=True))
    return [
        f"creates over REST (dap serve, {workers} clients, {seconds:g} s per round, {rounds} rounds,"
        f" {prefill} orders to begin with):",
        *(
            f"  creates/s ({label}, {counts[label]} indexes): {statistics.median(rates[label]):8.0f}"
            for label in ("derived", "before")
        ),
        f"  ratio: {ratio:.2f}x (goal >= 0.9x); per round: median {statistics.median(per_round):.2f}x,"
        f" from {per_round[0]:.2f}x to {per_round[-1]:.2f}x",
    ]
