"""Events as outbox rows against events as logical WAL messages, read two ways (issue 46), in one run:

    .venv/bin/python bench/walevents.py [--seconds 5] [--rounds 3] [--conns 8] [--burst 20000]
                                        [--notify] [--logs DIR] [--quick]

Four ways to write a row of ``bench_item``, each a single autocommitted statement sent by
``--conns`` connections as fast as they answer, for ``--seconds`` per round:

- ``floor``: the bare ``INSERT … RETURNING`` / ``UPDATE … RETURNING``, no event;
- ``outbox``: the same statement with its event inserted into ``dap.outbox`` in it
  (``events.builtin.written``, what ``dap serve`` sends), delivered by a dispatcher process
  (``DAP_EVENTS_SOURCE=outbox``);
- ``wal-sql``: the same statement with its event as ``pg_logical_emit_message`` in it, delivered
  by a dispatcher process peeking the slot with the SQL functions (``DAP_EVENTS_SOURCE=wal-sql``);
- ``wal-stream``: the same messages, delivered by a dispatcher process streaming the slot through
  a walsender (``DAP_EVENTS_SOURCE=wal``, ``events.walstream``).

The dispatchers run dap's own ``Dispatcher`` in a process of their own, started before the round
and stopped once it has delivered everything the round wrote (no entity declares deliveries: each
event is settled as read and gets its feed position, which is the whole of the outbox's work for
most events). Printed per variant (median over rounds): writes/s, Postgres CPU per write (every
backend's, the dispatcher's and the walsender's included, over the round; the walsender's alone),
the dispatcher process's own CPU per write (Python, its stream thread included), the event's own
Postgres CPU (the
variant's minus the floor's, per write) as a share of the row's (the floor's), emit → delivered
p50/p99 (``delivered_at - created_at`` of the round's events: Postgres's own clocks), and the
drain rate: events/s of a dispatcher started on ``--burst`` events already written.
The client runs in this process (Python, asyncpg): on a loaded machine compare ratios of the same
run only. ``--logs DIR``: each dispatcher process's log lines (dap's JSON lines, INFO and up: the
stream's opens, busy slot, flow control) go to a file of its own in ``DIR``, named after its
round, and each round's line says when its writes began.
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
from typing import Any

import asyncpg
import loadgen

ROOT = Path(__file__).resolve().parents[1]
TABLE = """
CREATE TABLE IF NOT EXISTS bench_item (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    title text NOT NULL,
    qty integer NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""
CREATE = "INSERT INTO bench_item (tenant_id, title, qty) VALUES ($1, $2, $3) RETURNING *"
UPDATE = (
    "UPDATE bench_item SET qty = qty + 1, version = version + 1, updated_at = now() WHERE id = $1 RETURNING *"
)
RECORD = (
    "jsonb_build_object('id', to_jsonb(w.id::text), 'title', to_jsonb(w.title), 'qty', to_jsonb(w.qty), "
    "'version', to_jsonb(w.version))"
)
VARIANTS = ("floor", "outbox", "wal-sql", "wal-stream")
# ``--variants``: others, e.g. ``wal-stream@0`` (the stream with ``walstream.GATHER`` = 0 s)
SOURCE = {"outbox": "outbox", "wal-sql": "wal-sql", "wal-stream": "wal"}  # DAP_EVENTS_SOURCE
SLOT = "walbench"
# whether each write NOTIFYs the dispatcher (``--notify``); else the dispatcher polls every 10 ms,
# as dap serve's writes wake their own process's dispatcher without a NOTIFY (one commit at a time);
# the stream's dispatcher is woken by its stream, and keeps dap serve's poll (1 s)
NOTIFY = "--notify" in sys.argv
LOGS: Path | None = None  # ``--logs``: where each dispatcher process's stderr goes
started = 0  # dispatcher processes started, for their log files' names


def statement(variant: str, action: str) -> tuple[str, int]:
    """The SQL a write of ``variant`` sends, and how many parameters its own statement has."""
    from dap.server.events import builtin

    base, n = (CREATE, 3) if action == "create" else (UPDATE, 1)
    if variant == "floor":
        return base, n
    # builtin.written's text (what dap serve sends), without its Write: the parameters follow
    text = builtin._written_sql(base, n, NOTIFY, RECORD, False, n + 8, variant != "outbox")
    return text, n


def args_of(variant: str, action: str, tenant: uuid.UUID, ids: list[uuid.UUID], i: int) -> list[Any]:
    own: list[Any] = [tenant, f"t{i}", i] if action == "create" else [ids[i % len(ids)]]
    if variant == "floor":
        return own
    name = "created" if action == "create" else "updated"
    made = [] if variant == "outbox" else [uuid.uuid4()]  # a message's id is the writer's (builtin.written)
    return [*own, tenant, "bench/item", action, name, "sub", "bench", None, None, *made]


async def load(
    conns: list[asyncpg.Connection], variant: str, action: str, seconds: float, ids: list[uuid.UUID]
) -> int:
    sql, _ = statement(variant, action)
    tenant = uuid.uuid4()
    stop = time.monotonic() + seconds
    counts = [0] * len(conns)

    async def one(k: int) -> None:
        i = k * 10_000_000
        while time.monotonic() < stop:
            await conns[k].fetchrow(sql, *args_of(variant, action, tenant, ids, i))
            i += 1
            counts[k] += 1

    await asyncio.gather(*(one(k) for k in range(len(conns))))
    return sum(counts)


async def delivered(conn: asyncpg.Connection, began: Any) -> int:
    """Events written since ``began`` that are in the feed (both designs put a delivered event
    there: the outbox marks its row, the slot's reader writes one)."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE created_at >= $1 AND delivered_at IS NOT NULL", began
        )
    )


def dispatcher(dsn: str, variant: str, name: str) -> subprocess.Popen[bytes]:
    global started
    started += 1
    stderr = open(LOGS / f"{started:02d}-{name}.log", "wb") if LOGS else None  # noqa: SIM115 (the child's)
    variant, _, gather = variant.partition("@")
    env = {
        **os.environ,
        "DAP_EVENTS_SOURCE": SOURCE[variant],
        "BENCH_GATHER": gather,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
    }
    flags = ["--notify"] if NOTIFY else []
    proc = subprocess.Popen(
        [sys.executable, __file__, "--dispatch", dsn, *flags], env=env, stdout=subprocess.PIPE, stderr=stderr
    )
    if stderr is not None:
        stderr.close()  # the child has its own copy
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


async def dispatch(dsn: str) -> None:
    from dap import logs
    from dap.server.events import channels, dispatcher, measures, walstream

    logs.configure("info")
    if os.environ.get("BENCH_GATHER"):
        walstream.GATHER = float(os.environ["BENCH_GATHER"])
    from dap.server.storage import db

    pool = await db.open_pool(dsn, 4)
    work = dispatcher.Dispatcher(
        pool,
        dsn,
        dict,
        channels.Channels(),
        measures.Counters(),
        # the stream wakes its dispatcher itself: its poll is dap serve's (retries only)
        dispatcher.Settings(poll=0.2 if NOTIFY else 0.01)
        if os.environ["DAP_EVENTS_SOURCE"] != "wal"
        else None,
    )
    work.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def drained(conn: asyncpg.Connection, began: Any, expected: int, limit: float = 120) -> None:
    end = time.monotonic() + limit
    while await delivered(conn, began) < expected and time.monotonic() < end:  # noqa: ASYNC110 (Postgres)
        await asyncio.sleep(0.02)


async def caught_up(conn: asyncpg.Connection, limit: float = 30) -> None:
    """Wait until the slot's reader has passed the WAL written so far (the rounds before this
    one's: a reader decodes them first), so that a round measures its own writes only."""
    from dap.server.events import slots

    name = slots.slot_name(SLOT)
    target = await conn.fetchval("SELECT pg_current_wal_lsn()")
    end = time.monotonic() + limit
    while time.monotonic() < end and not await conn.fetchval(  # noqa: ASYNC110 (Postgres)
        "SELECT confirmed_flush_lsn >= $2 FROM pg_replication_slots WHERE slot_name = $1", name, target
    ):
        await asyncio.sleep(0.05)


async def walsender(conn: asyncpg.Connection) -> int | None:
    from dap.server.events import slots

    found = await conn.fetchval(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", slots.slot_name(SLOT)
    )
    return int(found) if found is not None else None


async def round_of(
    dsn: str, pg: int, variant: str, action: str, seconds: float, conns: int, ids: list[uuid.UUID]
) -> dict[str, float]:
    proc = dispatcher(dsn, variant, f"{action}-{variant}") if variant != "floor" else None
    conn = await asyncpg.connect(dsn)
    clients = [await asyncpg.connect(dsn) for _ in range(conns)]  # their backends live through the round
    writers = {await c.fetchval("SELECT pg_backend_pid()") for c in clients}
    try:
        if proc:
            await asyncio.sleep(0.5)
            if variant != "outbox":
                await caught_up(conn)  # the WAL of the rounds before, decoded before the clock starts
        sender = await walsender(conn) if variant.startswith("wal-stream") else None
        began = await conn.fetchval("SELECT clock_timestamp()")
        if LOGS:
            print(f"{action} {variant}: writes begin at {began.isoformat()}", flush=True)
        before = loadgen.children_cpu(pg)
        own_before = loadgen.cpu_seconds([proc.pid]) if proc else 0.0
        writes = await load(clients, variant, action, seconds, ids)
        if proc:
            await drained(conn, began, writes)
        after = loadgen.children_cpu(pg)
        own = (loadgen.cpu_seconds([proc.pid]) - own_before) if proc else 0.0
        spent = {p: v - before.get(p, 0.0) for p, v in after.items()}
        cpu = sum(spent.values())
        mine = sum(spent.get(p, 0.0) for p in writers)  # the writes' own backends
        out = {
            "rps": writes / seconds,
            "cpu_us": cpu / writes * 1e6,
            "write_us": mine / writes * 1e6,
            "sender_us": spent.get(sender, 0.0) / writes * 1e6 if sender else 0.0,
            "py_us": own / writes * 1e6,
        }
        if proc:
            lat = await conn.fetchrow(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d) AS p50, "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY d) AS p99, count(*) AS n FROM "
                "(SELECT extract(epoch FROM delivered_at - created_at) * 1000 AS d FROM dap.outbox "
                "WHERE created_at >= $1 AND delivered_at IS NOT NULL) t",
                began,
            )
            out |= {"p50_ms": lat["p50"] or 0.0, "p99_ms": lat["p99"] or 0.0, "events": lat["n"]}
        return out
    finally:
        for client in clients:
            await client.close()
        await conn.close()
        if proc:
            proc.kill()
            proc.wait()


async def skip_ahead(conn: asyncpg.Connection) -> None:
    """The slot moved to the WAL's end (every event before is delivered: the rounds waited for
    it), so that a drain decodes the burst only, not the rounds before it."""
    from dap.server.events import slots

    for _ in range(100):  # the walsender of a reader killed just now may still hold the slot
        try:
            await conn.execute(
                "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slots.slot_name(SLOT)
            )
            return
        except asyncpg.ObjectInUseError:
            await asyncio.sleep(0.1)


async def burst(dsn: str, variant: str, count: int) -> float:
    """Events/s of a dispatcher started on ``count`` events already written."""
    sql, _ = statement(variant, "create")
    tenant = uuid.uuid4()
    conn = await asyncpg.connect(dsn)
    try:
        if variant != "outbox":
            await skip_ahead(conn)
        began = await conn.fetchval("SELECT clock_timestamp()")
        for at in range(0, count, 500):
            async with conn.transaction():
                await conn.executemany(
                    sql, [args_of(variant, "create", tenant, [], i) for i in range(at, at + 500)]
                )
        started = time.monotonic()
        proc = dispatcher(dsn, variant, f"drain-{variant}")
        try:
            await drained(conn, began, count, limit=300)
            return count / (time.monotonic() - started)
        finally:
            proc.kill()
            proc.wait()
    finally:
        await conn.close()


async def main(opts: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DAP_EVENTS_SOURCE"] = "wal"
    from dap import embedded
    from dap.server.events import outbox, slots

    tmp = Path(tempfile.mkdtemp(prefix="dap-walbench-"))
    server_dsn, server = embedded.start(tmp / "pg")
    try:
        admin = await asyncpg.connect(server_dsn)
        await admin.execute("CREATE DATABASE walbench")
        await admin.close()
        dsn = embedded.dsn_for_database(server_dsn, "walbench")
        conn = await asyncpg.connect(dsn)
        await conn.execute(TABLE)
        await outbox.ensure_schema(conn)
        await slots.ensure(conn, slots.slot_name(SLOT))
        ids = [
            r[0]
            for r in await conn.fetch(
                "INSERT INTO bench_item (tenant_id, title, qty) SELECT gen_random_uuid(), 'x', i "
                "FROM generate_series(1, 10000) i RETURNING id"
            )
        ]
        await conn.close()
        pg = loadgen.postmaster_pid(tmp / "pg")
        assert pg is not None
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for r in range(opts.rounds):
            for action in ("create", "update"):
                k = r % len(opts.variants)
                order = opts.variants[k:] + opts.variants[:k]  # each variant first in turn
                for variant in order:
                    got = await round_of(dsn, pg, variant, action, opts.seconds, opts.conns, ids)
                    results.setdefault((variant, action), []).append(got)
                    print(f"round {r + 1} {action:6} {variant:10} {got}", flush=True)
        drains: dict[str, list[float]] = {}
        readers = opts.variants[1:]
        for r in range(opts.rounds):
            k = r % len(readers)
            for variant in readers[k:] + readers[:k]:
                drains.setdefault(variant, []).append(await burst(dsn, variant, opts.burst))
                print(f"drain {r + 1} {variant:10} {drains[variant][-1]:.0f} events/s", flush=True)
        print(
            f"\n{opts.conns} connections, {opts.seconds:g} s rounds, {opts.rounds} rounds, "
            f"NOTIFY {'each write' if NOTIFY else 'none (10 ms poll)'} (medians; loaded machine), "
            f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )
        for action in ("create", "update"):
            floor = results[("floor", action)]
            row_cpu = statistics.median(x["cpu_us"] for x in floor)
            for variant in opts.variants:
                runs = results[(variant, action)]
                rps = statistics.median(x["rps"] for x in runs)
                cpu = statistics.median(x["cpu_us"] for x in runs)
                own = statistics.median(x["write_us"] for x in runs)
                ratios = [x["rps"] / f["rps"] for x, f in zip(runs, floor, strict=True)]
                line = (
                    f"{action:6} {variant:10} {rps:8.0f} writes/s  {statistics.median(ratios):.2f}x floor "
                    f"({min(ratios):.2f}-{max(ratios):.2f})  Postgres {cpu:4.0f} us/write "
                    f"(its statement {own:4.0f})"
                )
                if variant != "floor":
                    event = (cpu - row_cpu) / row_cpu * 100
                    row_own = statistics.median(x["write_us"] for x in floor)
                    inside = (own - row_own) / row_own * 100
                    line += (
                        f"  event {cpu - row_cpu:4.0f} us = {event:3.0f}% of the row's"
                        f" (in the statement {own - row_own:4.0f} us = {inside:3.0f}%)"
                        f"  emit->delivered p50 {statistics.median(x['p50_ms'] for x in runs):.1f} ms"
                        f" p99 {statistics.median(x['p99_ms'] for x in runs):.1f} ms"
                        f"  walsender {statistics.median(x['sender_us'] for x in runs):.0f} us"
                        f"  dispatcher process {statistics.median(x['py_us'] for x in runs):.0f} us"
                    )
                print(line)
        for variant, rates in drains.items():
            print(
                f"drain {variant:10} {statistics.median(rates):8.0f} events/s "
                f"({min(rates):.0f}-{max(rates):.0f})"
            )
    finally:
        embedded.stop(server, tmp / "pg")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--burst", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="1 s rounds, 1 round, 2,000 events")
    parser.add_argument("--notify", action="store_true", help="each write NOTIFYs (else a 10 ms poll)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="floor first, comma-separated")
    parser.add_argument("--logs", type=Path, help="a directory for the dispatcher processes' logs")
    parser.add_argument("--dispatch", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    opts.variants = tuple(opts.variants.split(","))
    if opts.logs:
        opts.logs.mkdir(parents=True, exist_ok=True)
        LOGS = opts.logs
    if opts.dispatch:
        asyncio.run(dispatch(opts.dispatch))
    else:
        if opts.quick:
            opts.seconds, opts.rounds, opts.burst = 1.0, 1, 2000
        asyncio.run(main(opts))
