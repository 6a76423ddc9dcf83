"""Derived indexes at scale: big and small tenants in one table, interleaved (issue 48).

    .venv/bin/python bench/indexes.py [--big 50] [--rows 20000] [--small 50] [--small-rows 10]
                                      [--medium 8] [--medium-rows 1000] [--build-rows N]
                                      [--inserts N] [--creates N] [--served-seconds S]
                                      [--data DIR] [--quick]
    # the issue's scale, 10,005,000 orders (about 35 min on 2 loaded cores):
    nice .venv/bin/python bench/indexes.py --big 500 --small 500 --data /tmp

Steps: start an embedded Postgres (its data in a temporary directory under ``--data``, or use
``DAP_BENCH_DSN``); migrate the example spec (``examples/procurement``) with its derived indexes;
fill ``buying/purchase_order`` with ``--big`` tenants of ``--rows`` rows, ``--small`` tenants of
``--small-rows`` and ``--medium`` tenants of ``--medium-rows`` (a full page, as a big tenant
answers), each group with one ``INSERT … SELECT generate_series`` in which the tenants take turns
2,000 rows at a time, so a big tenant's rows are spread over the heap; the other entities a tenth;
ANALYZE. Then:

1. **reads**: find by id and every declared list of the spec (each shape of
   ``storage.indexing.declared_lists``, as the statement ``storage.sql`` builds for it), timed on a
   big tenant and on a small and a medium one in alternation, several rounds: the ratio of each;
2. **writes**: insert throughput into the table with the derived indexes, and into the same table
   with only what was there before them (primary key, unique, relation and ``index: true`` ones):
   a bare single-row ``INSERT`` with ``synchronous_commit = off``, the indexes' own cost
   (``--inserts``); then an order's create as dap makes it (``operations.create``, the server's
   default durability) into two databases, one with each set (``--creates``); then creates/s over
   REST through a real ``dap serve`` whose derived indexes are dropped and rebuilt between rounds
   (``bench/indexes_served.py``, ``--served-seconds``); each in A B B A rounds, with the spread;
3. **online build**: one derived index built on the filled orders table (or, with
   ``--build-rows``, on a table of its own of that many rows) while writers insert and update
   continuously, with ``CREATE INDEX CONCURRENTLY`` (``storage.building``) and, for comparison,
   with a plain ``CREATE INDEX``: the longest write stall during each;
4. the big tenant's lists again without the derived indexes.

The reads' statements are sent straight to Postgres (asyncpg), not through HTTP: the figures are
those of the queries the indexes serve, not of the web stack (only the REST creates go through
it). Prints every figure; exits non-zero only when something fails to run. ``--quick`` shrinks
every size to prove the benchmark runs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dap.config.enums import FilterOp  # noqa: E402
from dap.server.storage import indexing, queries, sql  # noqa: E402
from dap.server.storage.tables import Index, Table, quote  # noqa: E402

EXAMPLE = ROOT / "examples" / "procurement"
VALUES = 7  # distinct values of a text, number or date column (equality filters keep 1/7)


def _value_sql(column: str, sql_type: str, unique: bool) -> str:
    """A SQL expression over ``g.i`` filling ``column`` of ``sql_type`` (few distinct values)."""
    if unique:
        return "'u' || g.i" if sql_type == "text" else "g.i"
    if column == "created_at" or sql_type == "timestamptz":
        return "now() - g.i * interval '1 second'"
    if column == "docstatus":
        return "(g.i % 3)::smallint"
    return {
        "text": f"'v' || (g.i % {VALUES})",
        "uuid": f"('00000000-0000-0000-0000-00000000000' || (g.i % {VALUES}))::uuid",
        "date": "date '2024-01-01' + (g.i % 1000)",
        "boolean": "g.i % 2 = 0",
        "bigint": "g.i % 1000",
        "double precision": "(g.i % 1000)::float8",
        "integer": "g.i % 1000",
        "time": "time '08:00'",
        "jsonb": "NULL",
    }.get(sql_type, f"(g.i % 1000)::{sql_type}" if sql_type.startswith("numeric") else "NULL")


def fill_statement(table: Table) -> str:
    """``INSERT … SELECT`` of rows ``$2 .. $3`` (``generate_series``) for tenant ``$1`` into ``table``."""
    unique = {i.columns[-1] for i in table.indexes if i.unique}
    cols = [c for c in table.columns if c.name not in ("tenant_id", "id", "version", "updated_at")]
    names = ", ".join(quote(c.name) for c in cols)
    values = ", ".join(_value_sql(c.name, c.sql_type, c.name in unique) for c in cols)
    return (
        f"INSERT INTO {quote(table.name)} (tenant_id, {names}) "
        f"SELECT $1::uuid, {values} FROM generate_series($2::int, $3::int) AS g(i)"
    )


def sample_value(sql_type: str) -> Any:
    """A value of ``sql_type`` that :func:`fill_statement` wrote to about 1/7 of the rows."""
    import datetime

    return {
        "text": "v3",
        "uuid": uuid.UUID("00000000-0000-0000-0000-000000000003"),
        "date": datetime.date(2024, 1, 4),
        "boolean": True,
        "bigint": 3,
        "integer": 3,
        "double precision": 3.0,
        "smallint": 1,
        "timestamptz": datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1),
    }.get(sql_type, 3)


def list_queries(shape: indexing.Shape, table: Table) -> list[tuple[str, queries.ListQuery]]:
    """The list queries of ``shape`` as the server would run them: the base list, then one per
    optional equality filter and one per range filter (each with the scope and the sort)."""

    def column(name: str) -> tuple[str, str] | None:
        c = table.column(name) if name in indexing.SYSTEM_COLUMNS else table.column_for(name)
        return (c.name, "smallint" if c.name == "docstatus" else c.sql_type) if c is not None else None

    base: list[queries.Condition] = []
    for name in shape.equal:
        found = column(name)
        if found is not None:
            base.append(queries.Condition(found[0], FilterOp.IN, (sample_value(found[1]),)))
    for name, is_null in shape.nulls:
        found = column(name)
        if found is not None:
            base.append(queries.Condition(found[0], FilterOp.NULL if is_null else FilterOp.NOTNULL, ()))
    sort = [queries.SortKey(c[0], desc) for name, desc in shape.sort if (c := column(name)) is not None]
    if not any(k.column == "id" for k in sort):
        sort.append(queries.SortKey("id", sort[-1].descending if sort else False))
    out = [(shape.source, queries.ListQuery(tuple(base), tuple(sort), 20, 0, False, None))]
    for name in shape.optional:
        found = column(name)
        if found is not None:
            cond = queries.Condition(found[0], FilterOp.EQ, (sample_value(found[1]),))
            out.append(
                (
                    f"{shape.source} ?{name}=",
                    queries.ListQuery((*base, cond), tuple(sort), 20, 0, False, None),
                )
            )
    for name in shape.ranges:
        found = column(name)
        if found is not None:
            cond = queries.Condition(found[0], FilterOp.GTE, (sample_value(found[1]),))
            out.append(
                (
                    f"{shape.source} ?{name}[gte]=",
                    queries.ListQuery((*base, cond), tuple(sort), 20, 0, False, None),
                )
            )
    return out


def statement(table: Table, query: queries.ListQuery, tenant: uuid.UUID) -> tuple[str, list[Any]]:
    return sql.select_list(table, query, tenant, None)


# --- the run -------------------------------------------------------------------------------

CHUNK = 2_000  # rows a big tenant gets per round of the fill: the tenants interleave in the heap
BIG_BASE, SMALL_BASE, MEDIUM_BASE = 0x1, 0x100000, 0x200000  # tenant k of a group: uuid(int=base + k)


def tenants_of(base: int, count: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=base + k) for k in range(count)]


def fill_many_statement(table: Table) -> str:
    """``INSERT … SELECT`` of rows ``$2 .. $3`` (``generate_series``) spread over ``$5`` tenants
    ``uuid(int=$1 + k)``: rows ``$4`` at a time per tenant, round robin, so that each tenant's rows
    are spread over the heap as if they had been written over time, in one statement."""
    single = fill_statement(table)
    number = "$1::int + ((g.i - $2::int) / $4::int) % $5::int"
    tenant = f"('00000000-0000-0000-0000-' || lpad(to_hex({number}), 12, '0'))::uuid"
    head, tail = single.split("SELECT $1::uuid, ", 1)
    return f"{head}SELECT {tenant}, {tail}"


async def fill(
    conn: asyncpg.Connection,
    table: Table,
    groups: list[tuple[int, int, int]],
) -> None:
    """Fill ``table`` with one statement per group of tenants: (first tenant number, tenants, rows
    each); a group's tenants take turns ``CHUNK`` rows at a time."""
    insert = fill_many_statement(table)
    start = 1
    for base, count, rows in groups:
        if not count or not rows:
            continue
        chunk = CHUNK if rows % CHUNK == 0 else rows
        await conn.execute(insert, base, start, start + count * rows - 1, chunk, count)
        start += count * rows
    await conn.execute(f"ANALYZE {quote(table.name)}")


async def _timed(
    conn: asyncpg.Connection, statement: str, args: list[Any], n: int
) -> tuple[float, float, int]:
    """Median seconds of ``n`` executions seen by the client (the first, which prepares, is not
    counted), Postgres's own execution time (EXPLAIN ANALYZE), and the rows answered."""
    rows = len(await conn.fetch(statement, *args))
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await conn.fetch(statement, *args)
        times.append(time.perf_counter() - started)
    raw = await conn.fetchval(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) {statement}", *args)
    plan = json.loads(raw) if isinstance(raw, str) else raw
    return statistics.median(times), plan[0]["Execution Time"] / 1000, rows


Case = tuple[str, Table, Any]


def cases_of(catalog: Any) -> list[Case]:
    """Find by id, then every declared list of the spec with each of its filters."""
    mains = {t.entity: t for t in catalog.tables if t.kind == "entity"}
    shapes = indexing.declared_lists(catalog.entities, [*catalog.views.items(), *catalog.ui_parts.items()])
    po = mains["buying/purchase_order"]
    cases: list[Case] = [("find by id (buying/purchase_order)", po, None)]
    for shape in shapes:
        table = mains[shape.entity]
        cases += [(label, table, query) for label, query in list_queries(shape, table)]
    return cases


async def measure(
    pool: asyncpg.Pool, cases: list[Case], tenants: dict[str, list[uuid.UUID]], rounds: int, n: int
) -> dict[tuple[str, str], list[tuple[float, float, int]]]:
    """Each case on each group of tenants, alternating between the groups, ``rounds`` times."""
    po = cases[0][1]
    found: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    async with pool.acquire() as conn:
        ids = {
            t: [
                r["id"]
                for r in await conn.fetch(f"SELECT id FROM {quote(po.name)} WHERE tenant_id = $1 LIMIT 50", t)
            ]
            for group in tenants.values()
            for t in group[:8]
        }
        for r in range(rounds):
            for label, table, query in cases:
                for group, members in tenants.items():
                    tenant = members[r % min(8, len(members))]
                    if query is None:
                        text, args = table.select_by_id, [tenant, ids[tenant][r % len(ids[tenant])]]
                    else:
                        text, args = statement(table, query, tenant)
                    found.setdefault((label, group), []).append(await _timed(conn, text, args, n))
    return found


def _median(samples: list[tuple[float, float, int]], i: int) -> float:
    return statistics.median(s[i] for s in samples) * 1000


async def reads(
    pool: asyncpg.Pool, catalog: Any, groups: dict[str, list[uuid.UUID]], rounds: int, n: int
) -> tuple[list[str], list[Case]]:
    """Find and every declared list: the big tenants against each other group, interleaved,
    ``rounds`` times."""
    cases = cases_of(catalog)
    found = await measure(pool, cases, groups, rounds, n)
    out = [
        "reads: ms per statement, median; client = round trip with the rows decoded, pg = Postgres's",
        "execution time (EXPLAIN ANALYZE); ratio = other's time / big's (the big tenant's relative speed):",
    ]
    for other in [g for g in groups if g != "big"]:
        out.append(f" big against {other}:")
        worst_client = worst_pg = 10.0
        for label, _, _ in cases:
            b, sm = found[(label, "big")], found[(label, other)]
            rc, rp = _median(sm, 0) / _median(b, 0), _median(sm, 1) / _median(b, 1)
            worst_client, worst_pg = min(worst_client, rc), min(worst_pg, rp)
            out.append(
                f"  {label:<52} client {_median(b, 0):6.3f} / {_median(sm, 0):6.3f} = {rc:4.2f}x"
                f"   pg {_median(b, 1):6.3f} / {_median(sm, 1):6.3f} = {rp:4.2f}x"
                f"   rows {int(statistics.median(x[2] for x in b))}"
                f"/{int(statistics.median(x[2] for x in sm))}"
            )
        out.append(f"  lowest ratio: client {worst_client:.2f}x, pg {worst_pg:.2f}x (goal >= 0.9x)")
    return out, cases


async def without_derived(
    pool: asyncpg.Pool,
    catalog: Any,
    cases: list[Case],
    bigs: list[uuid.UUID],
    plain: dict[str, tuple[Index, ...]],
    rounds: int,
    n: int,
) -> list[str]:
    """The big tenant's lists again with the derived indexes dropped (the indexes from before them
    put back): what the derivation changed."""
    async with pool.acquire() as conn:
        for d in catalog.indexes.indexes:
            if d.origin == "derived":
                await conn.execute(f"DROP INDEX {quote(d.index.name)}")
        for table, indexes in plain.items():
            for i in indexes:
                await conn.execute(i.ddl(table))
        for table in plain:
            await conn.execute(f"ANALYZE {quote(table)}")
    before = await measure(pool, cases, {"big": bigs}, rounds, n)
    return before_lines(before, cases)


def before_lines(
    before: dict[tuple[str, str], list[tuple[float, float, int]]], cases: list[Case]
) -> list[str]:
    out = ["big tenant without the derived indexes (only primary key, unique, relation, index: true):"]
    for label, _, _ in cases:
        b = before[(label, "big")]
        out.append(f"  {label:<52} client {_median(b, 0):6.3f}   pg {_median(b, 1):6.3f}")
    return out


async def writes(
    pool: asyncpg.Pool, catalog: Any, plain: tuple[Index, ...], prefill: int, n: int, rounds: int
) -> list[str]:
    """Single-row inserts (as a create sends them) with the derived indexes vs without them."""
    po = next(t for t in catalog.tables if t.entity == "buying/purchase_order" and t.kind == "entity")
    tenant = uuid.uuid4()
    out = []
    async with pool.acquire() as conn:
        # no wait for the WAL flush of each commit: what is left is the work of the indexes
        await conn.execute("SET synchronous_commit = off")
        made = {}
        for label, indexes in (("derived", po.indexes), ("before", plain)):
            name = f"bench_writes_{label}"
            await conn.execute(f"DROP TABLE IF EXISTS {quote(name)}")
            await conn.execute(
                f"CREATE TABLE {quote(name)} (LIKE {quote(po.name)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            await conn.execute(f"ALTER TABLE {quote(name)} ADD PRIMARY KEY (tenant_id, id)")
            copy = dataclass_replace(po, name=name)
            for i in indexes:
                await conn.execute(dataclass_replace(i, name=f"{name}_{i.name}"[:63]).ddl(name))
            await conn.execute(fill_statement(copy), tenant, 1, prefill)
            made[label] = (copy, len(indexes))
        rates: dict[str, list[float]] = {label: [] for label in made}
        for r in range(rounds):
            # A B B A …: neither table always goes first (a loaded machine drifts within a round)
            for label, (copy, _) in list(made.items())[:: -1 if r % 2 else 1]:
                text = fill_statement(copy)
                base = prefill + 1 + (r + 1) * 10 * n
                started = time.perf_counter()
                for i in range(n):
                    await conn.execute(text, tenant, base + i, base + i)
                rates[label].append(n / (time.perf_counter() - started))
        for label, (copy, count) in made.items():
            out.append(f"  inserts/s, {count + 1} indexes ({label}): {statistics.median(rates[label]):8.0f}")
            await conn.execute(f"DROP TABLE {quote(copy.name)}")
    ratio = statistics.median(rates["derived"]) / statistics.median(rates["before"])
    per_round = sorted(d / b for d, b in zip(rates["derived"], rates["before"], strict=True))
    return [
        f"writes (one connection, single-row INSERT, {prefill} rows in the table, {rounds} rounds):",
        *out,
        f"  ratio: {ratio:.2f}x (goal >= 0.9x); per round: median {statistics.median(per_round):.2f}x,"
        f" from {per_round[0]:.2f}x to {per_round[-1]:.2f}x",
    ]


async def creates(
    server_dsn: str, name: str, catalog: Any, plain: tuple[Index, ...], prefill: int, n: int, rounds: int
) -> list[str]:
    """An order's create as dap makes it (``operations.create``, the pipeline a REST ``POST`` runs
    after decoding: validation, the relation check, the order's number, the period check folded
    into the ``INSERT``, the row, its event in the outbox), committed at the server's default
    durability, into a database whose orders table has the derived indexes and one whose orders
    table has only the indexes from before them; one caller, ``rounds`` rounds of ``n`` creates
    each, A B B A."""
    from dap import embedded
    from dap.server import booting
    from dap.server.access import auth
    from dap.server.storage import caching, db
    from dap.server.storage.workspaces import Workspace
    from dap.server.workflows import operations

    resource = catalog.resource("buying", "purchase_order")
    supplier = next(t for t in catalog.tables if t.entity == "buying/supplier" and t.kind == "entity")
    tenant = uuid.uuid4()
    workspace = Workspace("bench", "bench", tenant, datetime.datetime.now(datetime.UTC))
    principal = auth.Principal(sub="bench", username="bench", roles=("admin",), workspace="bench")
    calls: dict[str, operations.Call] = {}
    counts: dict[str, int] = {}
    pools: list[asyncpg.Pool] = []
    bodies: dict[str, dict[str, Any]] = {}
    try:
        for label in ("derived", "before"):
            database = f"{name}_{label}"
            admin = await asyncpg.connect(server_dsn)
            await admin.execute(f'CREATE DATABASE "{database}"')
            await admin.close()
            pool = await db.open_pool(embedded.dsn_for_database(server_dsn, database), 4)
            pools.append(pool)
            await booting.prepare_database(pool, catalog)
            async with pool.acquire() as conn:
                if label == "before":  # the orders' derived indexes dropped, those of before back
                    for d in catalog.indexes.indexes:
                        if d.origin == "derived" and d.table == resource.table.name:
                            await conn.execute(f"DROP INDEX {quote(d.index.name)}")
                    for i in plain:
                        await conn.execute(i.ddl(resource.table.name))
                await conn.execute(fill_statement(supplier), tenant, 1, 1)
                found = await conn.fetchrow(f"SELECT id, region FROM {quote(supplier.name)} LIMIT 1")
                bodies[label] = {  # the create scope: the order's region is its supplier's
                    "supplier": str(found["id"]),
                    "order_date": "2026-11-28",
                    "region": found["region"],
                    "buyer": "bench",
                }
                await conn.execute(fill_statement(resource.table), tenant, 1, prefill)
                await conn.execute(f"ANALYZE {quote(resource.table.name)}")
                counts[label] = await conn.fetchval(
                    "SELECT count(*) FROM pg_indexes WHERE tablename = $1", resource.table.name
                )
                setting = await conn.fetchval("SHOW synchronous_commit")
            calls[label] = operations.Call(pool, caching.FindCache(), workspace, principal, catalog, resource)
        rates: dict[str, list[float]] = {"derived": [], "before": []}
        for r in range(rounds):
            for label in ("derived", "before")[:: -1 if r % 2 else 1]:  # A B B A
                started = time.perf_counter()
                for _ in range(n):
                    await operations.create(calls[label], dict(bodies[label]), submit=False)
                rates[label].append(n / (time.perf_counter() - started))
    finally:
        for pool in pools:
            await pool.close()
    ratio = statistics.median(rates["derived"]) / statistics.median(rates["before"])
    per_round = sorted(d / b for d, b in zip(rates["derived"], rates["before"], strict=True))
    return [
        f"creates (dap's create of an order, operations.create; one caller; synchronous_commit = {setting};"
        f" {prefill} orders in the table, {rounds} rounds of {n}):",
        *(
            f"  creates/s, {counts[label]} indexes ({label}): {statistics.median(rates[label]):8.0f}"
            for label in ("derived", "before")
        ),
        f"  ratio: {ratio:.2f}x (goal >= 0.9x); per round: median {statistics.median(per_round):.2f}x,"
        f" from {per_round[0]:.2f}x to {per_round[-1]:.2f}x",
    ]


def dataclass_replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


async def _writer(
    pool: asyncpg.Pool, name: str, tenant: uuid.UUID, stop: asyncio.Event, stalls: list[tuple[float, float]]
) -> int:
    """Insert and update rows until ``stop``; record (start, seconds) of each write."""
    done = 0
    async with pool.acquire() as conn:
        while not stop.is_set():
            started = time.perf_counter()
            row_id = await conn.fetchval(
                f"INSERT INTO {quote(name)} (tenant_id, buyer, order_date) "
                "VALUES ($1, 'w', current_date) RETURNING id",
                tenant,
            )
            await conn.execute(
                f"UPDATE {quote(name)} SET version = version + 1 WHERE tenant_id = $1 AND id = $2",
                tenant,
                row_id,
            )
            stalls.append((started, time.perf_counter() - started))
            done += 1
    return done


async def build_stall(pool: asyncpg.Pool, catalog: Any, rows: int, writers: int) -> list[str]:
    """The longest write while a derived index is built CONCURRENTLY, and with a plain CREATE INDEX:
    on a table of its own of ``rows`` rows, or (``rows`` = 0) on the filled purchase-order table."""
    po = next(t for t in catalog.tables if t.entity == "buying/purchase_order" and t.kind == "entity")
    index = max(po.indexes, key=lambda i: len(i.columns))
    name = "bench_build" if rows else po.name
    tenant = uuid.uuid4()
    async with pool.acquire() as conn:
        if rows:
            await conn.execute(f"DROP TABLE IF EXISTS {name}")
            await conn.execute(
                f"CREATE TABLE {name} (LIKE {quote(po.name)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            await conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (tenant_id, id)")
            copy = dataclass_replace(po, name=name)
            for chunk in range(0, rows, 100_000):
                await conn.execute(fill_statement(copy), tenant, chunk + 1, min(rows, chunk + 100_000))
            await conn.execute(f"ANALYZE {name}")
        else:
            rows = await conn.fetchval(f"SELECT count(*) FROM {quote(name)}")
    out = [f"online build ({rows} rows, {writers} writers each inserting and updating a row in a loop):"]
    built = dataclass_replace(index, name="bench_build_idx")
    for label, concurrently in (("CREATE INDEX CONCURRENTLY", True), ("plain CREATE INDEX", False)):
        stop = asyncio.Event()
        stalls: list[tuple[float, float]] = []
        tasks = [asyncio.create_task(_writer(pool, name, tenant, stop, stalls)) for _ in range(writers)]
        await asyncio.sleep(1.0)
        async with pool.acquire() as conn:
            started = time.perf_counter()
            await conn.execute(built.ddl(name, concurrently=concurrently))
            ended = time.perf_counter()
            await asyncio.sleep(0.5)
            stop.set()
            done = sum(await asyncio.gather(*tasks))
            await conn.execute("DROP INDEX bench_build_idx")
        during = [s for t, s in stalls if t <= ended and t + s >= started]
        longest, previous = (
            max(during, default=0) * 1000,
            max((s for t, s in stalls if t + s < started), default=0) * 1000,
        )
        out.append(
            f"  {label:<26} build {ended - started:6.2f} s; writes during it {len(during):6d}, longest "
            f"{longest:8.1f} ms (before it: longest {previous:6.1f} ms);"
            f" {done} writes in all"
        )
    if name != po.name:
        async with pool.acquire() as conn:
            await conn.execute(f"DROP TABLE {name}")
    return out


def start_postgres(tmp: Path) -> tuple[str, Any]:
    server_dsn = os.environ.get("DAP_BENCH_DSN")
    if server_dsn:
        return server_dsn, None
    from dap import embedded

    print("starting embedded Postgres ...", flush=True)
    return embedded.start(tmp / "pg")


async def main(args: argparse.Namespace) -> int:
    from dap import embedded
    from dap.server import booting
    from dap.server.cli import load_catalog
    from dap.server.storage import db, tables

    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-indexes-", dir=args.data))
    server_dsn, server = start_postgres(tmp)
    began = time.perf_counter()

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - began:7.0f} s] {text}", flush=True)

    try:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        admin = await asyncpg.connect(server_dsn)
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.close()
        pool = await db.open_pool(embedded.dsn_for_database(server_dsn, name), args.writers + 2)
        catalog = load_catalog(EXAMPLE)
        await booting.prepare_database(pool, catalog)
        groups = {
            "big": tenants_of(BIG_BASE, args.big),
            "small": tenants_of(SMALL_BASE, args.small),
            "medium": tenants_of(MEDIUM_BASE, args.medium),
        }
        groups = {g: members for g, members in groups.items() if members}
        async with pool.acquire() as conn:
            for t in catalog.tables:
                if t.kind == "entity":
                    tenth = t.entity != "buying/purchase_order"  # the other entities: a tenth
                    medium_rows = max(args.medium_rows // 10, 10) if tenth else args.medium_rows
                    await fill(
                        conn,
                        t,
                        [
                            (BIG_BASE, args.big, max(args.rows // 10, 10) if tenth else args.rows),
                            (SMALL_BASE, args.small, args.small_rows),
                            (MEDIUM_BASE, args.medium, medium_rows),
                        ],
                    )
                    say(f"filled {t.name}")
        total = args.big * args.rows + args.small * args.small_rows + args.medium * args.medium_rows
        say(
            f"filled: buying/purchase_order {args.big} tenants x {args.rows} rows"
            f" + {args.small} x {args.small_rows} + {args.medium} x {args.medium_rows}"
            f" ({total} rows; other entities a tenth), one INSERT … SELECT per table and group"
        )
        lines, cases = await reads(pool, catalog, groups, args.rounds, args.n)
        print("\n".join(lines), flush=True)
        say("reads done")
        before = {t.name: t.indexes for t in tables.all_tables(catalog.entities) if t.kind == "entity"}
        plain = before["buying__purchase_order"]
        if args.inserts:
            for line in await writes(pool, catalog, plain, args.prefill, args.inserts, args.write_rounds):
                print(line, flush=True)
            say("writes done")
        if args.creates:
            for line in await creates(
                server_dsn, name, catalog, plain, args.prefill, args.creates, args.write_rounds
            ):
                print(line, flush=True)
            say("creates done")
        if args.served_seconds:
            import indexes_served

            for line in await indexes_served.served(
                server_dsn,
                EXAMPLE,
                catalog,
                plain,
                fill_statement,
                args.prefill,
                args.served_seconds,
                args.served_workers,
                args.served_rounds,
            ):
                print(line, flush=True)
            say("creates over REST done")
        if args.build_rows != 0:
            for line in await build_stall(pool, catalog, args.build_rows or 0, args.writers):
                print(line, flush=True)
            say("online build done")
        for line in await without_derived(pool, catalog, cases, groups["big"], before, args.rounds, args.n):
            print(line, flush=True)
        say("done")
        await pool.close()
        return 0
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=50, help="big tenants")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of each big tenant")
    parser.add_argument("--small", type=int, default=50, help="small tenants")
    parser.add_argument("--small-rows", type=int, default=10)
    parser.add_argument("--medium", type=int, default=8, help="tenants answering a full page, as a big one")
    parser.add_argument("--medium-rows", type=int, default=1_000)
    parser.add_argument("--data", default=None, help="where the embedded Postgres's data goes")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the reads")
    parser.add_argument("--write-rounds", type=int, default=21, help="interleaved rounds of the inserts")
    parser.add_argument("--n", type=int, default=20, help="executions per case, tenant and round")
    parser.add_argument("--prefill", type=int, default=200_000, help="rows in the tables the inserts go to")
    parser.add_argument("--inserts", type=int, default=1_000, help="inserts per table and round (0: skip)")
    parser.add_argument(
        "--creates", type=int, default=300, help="dap creates of an order per database and round (0: skip)"
    )
    parser.add_argument(
        "--served-seconds", type=float, default=10.0, help="seconds per round of creates over REST (0: skip)"
    )
    parser.add_argument("--served-workers", type=int, default=4, help="concurrent REST clients")
    parser.add_argument(
        "--served-rounds", type=int, default=8, help="interleaved rounds of creates over REST"
    )
    parser.add_argument(
        "--build-rows",
        type=int,
        default=None,
        help="rows of a table of its own for the online build (default: build on the filled table; 0: skip)",
    )
    parser.add_argument("--writers", type=int, default=4, help="concurrent writers during the build")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: prove the benchmark runs")
    args = parser.parse_args()
    if args.quick:
        args.big, args.rows, args.small, args.medium, args.medium_rows = 3, 2_000, 3, 2, 200
        args.rounds, args.n, args.prefill, args.inserts, args.writers = 2, 3, 2_000, 100, 2
        args.write_rounds, args.creates = 2, 20
        args.served_seconds, args.served_rounds, args.served_workers = 1.0, 2, 2
    sys.exit(asyncio.run(main(args)))
