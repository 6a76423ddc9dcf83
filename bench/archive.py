"""The hot path against the archive's size: find and list of 10,000 hot rows with 0 and with
1,000,000 archived rows of the same entity (issue 43).

    .venv/bin/python bench/archive.py [--seconds 6] [--workers 8] [--archived 1000000]

One ``dap serve``, two entities with the same fields and ``archive`` declared: ``bench/doc`` and
``bench/twin``, 10,000 hot rows each. Round 0: find by id (random hot ids) and list
(``?limit=50``, random offsets) of both, ``--workers`` concurrent clients, interleaved. Then
``--archived`` rows of ``bench/doc`` are written to ``dap.archive`` (as the archive run writes
them) and the same rounds run again. Each phase alternates doc and twin in ``--rounds`` short
turns, so the machine's drift hits both alike; the ratio is ``doc/twin`` after over ``doc/twin``
before (the twin's archive stays empty). The target: at least 0.95. Uses ``DAP_BENCH_DSN`` when
set, else an embedded Postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import asyncpg
import rest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENTITY = """apiVersion: dap.io/v1
kind: Entity
metadata: {name: %s, module: bench}
spec:
  characteristic: transaction
  lifecycle: true
  fields:
    - {name: posting_date, type: date}
    - {name: memo, type: string}
  archive: {after: 30d, retain: 3650d}
  expose: [{type: rest}]
"""
HOT = 10_000


async def _load_hot(dsn: str, entity: str) -> tuple[object, list[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        ids = await conn.fetch(
            f"INSERT INTO bench__{entity} (tenant_id, created_by, owner, posting_date, memo, docstatus) "
            "SELECT $1, 'bench', 'bench', date '2026-01-01' + (g % 300), 'memo ' || g, 1 "
            "FROM generate_series(1, $2) g RETURNING id",
            tenant,
            HOT,
        )
        await conn.execute(f"ANALYZE bench__{entity}")
        return tenant, [str(r["id"]) for r in ids]
    finally:
        await conn.close()


async def _load_archive(dsn: str, tenant: object, n: int) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await conn.execute(
            "INSERT INTO dap.archive (tenant_id, entity, id, record, retain_until) "
            "SELECT $1, 'bench/doc', gen_random_uuid(), jsonb_build_object('memo', 'archived ' || g, "
            "'posting_date', '2020-01-01', 'docstatus', 'submitted'), now() + interval '10 years' "
            "FROM generate_series(1, $2) g",
            tenant,
            n,
        )
        await conn.execute("ANALYZE dap.archive")
        return time.perf_counter() - started
    finally:
        await conn.close()


async def _count(
    base: str, entity: str, ids: list[str], kind: str, seconds: float, workers: int
) -> tuple[int, float]:
    """Requests done and seconds spent by ``workers`` clients for ``seconds``."""
    headers = rest.bench_token("bench", ["admin"])
    done = 0
    stop = time.perf_counter() + seconds
    rng = random.Random(43)

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            if kind == "find":
                url = f"{base}/default/api/bench/{entity}/{rng.choice(ids)}"
            else:
                url = f"{base}/default/api/bench/{entity}?limit=50&offset={rng.randrange(0, HOT - 50)}"
            async with http.get(url, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            done += 1

    async with aiohttp.ClientSession() as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(workers)))
        return done, time.perf_counter() - started


async def _round(
    base: str, ids: dict[str, list[str]], args: argparse.Namespace
) -> dict[tuple[str, str], float]:
    """Requests/s of each (entity, kind), measured in ``--rounds`` short interleaved turns."""
    done: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for kind in ("find", "list"):
            for entity in ("doc", "twin"):
                n, spent = await _count(
                    base, entity, ids[entity], kind, args.seconds / args.rounds, args.workers
                )
                total = done.setdefault((entity, kind), [0, 0.0])
                total[0] += n
                total[1] += spent
    return {key: n / spent for key, (n, spent) in done.items()}


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="dap-bench-archive-") as tmp:
        scratch = Path(tmp)
        spec = scratch / "spec"
        spec.mkdir()
        (spec / "module.yaml").write_text("apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: bench}\n")
        for name in ("doc", "twin"):
            (spec / f"{name}.yaml").write_text(ENTITY % name)
        server_dsn, server = rest.start_postgres(scratch)
        procs = []
        try:
            dsn = await rest.new_database(server_dsn)
            port = rest.port()
            procs.append(rest.spawn_serve(spec, dsn, port))
            base = f"http://127.0.0.1:{port}"
            await rest.wait_http(f"{base}/default/_ui/_meta/apps")
            tenant, doc_ids = await _load_hot(dsn, "doc")
            _, twin_ids = await _load_hot(dsn, "twin")
            ids = {"doc": doc_ids, "twin": twin_ids}
            await _count(base, "doc", doc_ids, "find", 1.0, args.workers)  # warm-up
            before = await _round(base, ids, args)
            took = await _load_archive(dsn, tenant, args.archived)
            print(f"{args.archived:,} archived rows of bench/doc written in {took:.1f} s", flush=True)
            after = await _round(base, ids, args)
            for kind in ("find", "list"):
                d0, d1 = before[("doc", kind)], after[("doc", kind)]
                t0, t1 = before[("twin", kind)], after[("twin", kind)]
                print(
                    f"{kind}: doc {d0:.0f}/s with 0 archived, {d1:.0f}/s with {args.archived:,}; "
                    f"twin (never archived) {t0:.0f}/s, {t1:.0f}/s; doc/twin {d0 / t0:.2f} before, "
                    f"{d1 / t1:.2f} after: ratio {(d1 / t1) / (d0 / t0):.2f}",
                    flush=True,
                )
        finally:
            rest.clean_up(procs, server)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per entity and kind, each phase")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved turns per phase")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--archived", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="small and short: that it runs (make test)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.workers, args.archived = 1.0, 1, 4, 20_000
    sys.exit(asyncio.run(main(args)))
