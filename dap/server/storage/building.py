"""Online index builds: the indexes the tables describe, built without blocking writes.

A plain ``CREATE INDEX`` holds a lock that blocks every write to the table for as long as the
build takes: minutes on a table of millions of rows. ``CREATE INDEX CONCURRENTLY`` lets writes go
on, but cannot run in a transaction, so the migration (``schema_sync``) commits without these
steps and this module builds them afterwards, while the server is serving:

- it compares the indexes the tables describe with ``pg_index``: a missing one is built, an
  ``INVALID`` one (a concurrent build that died: a crash, a cancelled boot, a unique violation) is
  dropped concurrently and built again. That comparison, not the migration's record, is what makes
  a build resume after a crash: the next boot finds the index missing or invalid;
- then it drops the indexes that gave way (``dap.index_drops``), concurrently as well;
- one process builds at a time (a session advisory lock); another that finds it taken skips;
- while a build runs, its progress (``pg_stat_progress_create_index``) is logged every few seconds
  and kept in :data:`PROGRESS` for the metrics (:class:`ProgressCollector`: ``dap_index_build_done``
  and ``dap_index_build_total`` by index and phase, ``dap_index_builds_total{result}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dap.server.storage import db
from dap.server.storage.tables import Index, Table, quote

log = logging.getLogger(__name__)

LOCK_KEY = 0x0DA91D8E  # pg_try_advisory_lock key of the online builder
PROGRESS_EVERY = 5.0  # seconds between progress lines


@dataclass(frozen=True)
class Pending:
    table: str
    index: Index
    invalid: bool  # an earlier build left it INVALID: drop, then build again


@dataclass
class Progress:
    """The build under way, for the metrics (``dap_index_build_*``)."""

    index: str = ""
    phase: str = ""
    done: int = 0
    total: int = 0
    built: int = 0  # indexes built by this process
    failed: int = 0


PROGRESS = Progress()

_FOUND = """
SELECT c.relname AS name, i.indisvalid AS valid
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname = ANY($1::text[])
"""

_PROGRESS = """
SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total, lockers_done, lockers_total
FROM pg_stat_progress_create_index WHERE pid = $1
"""


async def pending(conn: db.Connection, tables: Iterable[Table]) -> list[Pending]:
    """The described indexes that are missing or ``INVALID`` in the database, in table order."""
    wanted = [(t.name, i) for t in tables for i in t.indexes]
    rows = await conn.fetch(_FOUND, [i.name for _, i in wanted])
    valid = {r["name"]: r["valid"] for r in rows}
    return [
        Pending(table, i, invalid=valid.get(i.name) is False)
        for table, i in wanted
        if valid.get(i.name) is not True
    ]


async def build(pool: asyncpg.Pool, tables: Iterable[Table], *, every: float = PROGRESS_EVERY) -> list[str]:
    """Build what :func:`pending` finds and run the waiting drops; answer the indexes built.

    Returns at once (nothing built) when another process holds the builder's lock.
    """
    tables = tuple(tables)
    described = {i.name for t in tables for i in t.indexes}
    built: list[str] = []
    # The builder's lock is a session lock (CREATE INDEX CONCURRENTLY runs outside a transaction,
    # so no _xact_ lock can cover it): its connection goes back to the pool only once the lock is
    # released; when the release cannot be sent (a killed backend, a cancel during it), the
    # connection is terminated, and the lock ends with its session.
    conn = await pool.acquire()
    try:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
            log.info("index builds: another process is building; skipped")
            return built
        for item in await pending(conn, tables):
            if await _build_one(pool, conn, item, every):
                built.append(item.index.name)
        drops = await conn.fetch("SELECT index_name FROM dap.index_drops ORDER BY planned_at")
        for row in drops:
            name = row["index_name"]
            if name not in described:  # described again since: it stays
                await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
                log.info("index dropped", extra={"ctx": {"index": name}})
            await conn.execute("DELETE FROM dap.index_drops WHERE index_name = $1", name)
    finally:
        unlocked = False
        try:
            unlocked = await conn.fetchval("SELECT pg_advisory_unlock($1)", LOCK_KEY) is not None
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            log.warning("index builds: the builder's lock was not released; its connection is closed")
        finally:
            if not unlocked:
                conn.terminate()
            await pool.release(conn)
    return built


async def _build_one(pool: asyncpg.Pool, conn: db.Connection, item: Pending, every: float) -> bool:
    name = quote(item.index.name)
    started = time.monotonic()
    ctx: dict[str, Any] = {"index": item.index.name, "table": item.table}
    if item.invalid:
        log.warning("index build: an earlier build left it INVALID; rebuilding", extra={"ctx": ctx})
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    log.info("index build started", extra={"ctx": ctx})
    PROGRESS.index, PROGRESS.phase, PROGRESS.done, PROGRESS.total = item.index.name, "starting", 0, 0
    watcher = asyncio.create_task(_watch(pool, conn.get_server_pid(), ctx, every))
    try:
        await conn.execute(item.index.ddl(item.table, concurrently=True))
    except asyncpg.PostgresError as exc:
        PROGRESS.failed += 1
        log.error(
            "index build failed; it is retried at the next boot",
            extra={"ctx": {**ctx, "error": f"{exc.__class__.__name__}: {exc}"}},
        )
        with contextlib.suppress(asyncpg.PostgresError):  # leave no INVALID index behind
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        return False
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        PROGRESS.index, PROGRESS.phase = "", ""
    PROGRESS.built += 1
    log.info("index built", extra={"ctx": {**ctx, "seconds": round(time.monotonic() - started, 3)}})
    return True


async def _watch(pool: asyncpg.Pool, pid: int, ctx: dict[str, Any], every: float) -> None:
    """Log the build's progress every ``every`` seconds (on a connection of its own)."""
    while True:
        await asyncio.sleep(every)
        try:
            async with pool.acquire(timeout=every) as conn:
                row = await conn.fetchrow(_PROGRESS, pid)
        except (asyncpg.PostgresError, OSError, TimeoutError):
            continue
        if row is None:
            continue
        scanning = row["blocks_total"] > 0 and row["tuples_total"] == 0
        done, total = (
            (row["blocks_done"], row["blocks_total"])
            if scanning
            else (row["tuples_done"], row["tuples_total"])
        )
        PROGRESS.phase, PROGRESS.done, PROGRESS.total = row["phase"], done, total
        percent = round(100 * done / total, 1) if total else None
        log.info("index build progress", extra={"ctx": {**ctx, "phase": row["phase"], "percent": percent}})


class Builder:
    """The builds of one server process, run in the background from start to stop."""

    def __init__(self, pool: asyncpg.Pool, tables: Iterable[Table], *, every: float = PROGRESS_EVERY) -> None:
        self._pool = pool
        self._tables = tuple(tables)
        self._every = every
        self.task: asyncio.Task[list[str]] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(build(self._pool, self._tables, every=self._every))
        self.task.add_done_callback(_report)

    async def stop(self) -> None:
        """Cancel a build under way (Postgres cancels the statement; the next boot rebuilds it)."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


def _report(task: asyncio.Task[list[str]]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("index builds stopped", extra={"ctx": {"error": f"{exc.__class__.__name__}: {exc}"}})


class ProgressCollector(Collector):
    """``dap_index_build_done``/``_total`` (blocks or tuples of the build under way, by index and
    phase) and ``dap_index_builds_total{result}`` of this process."""

    def __init__(self, progress: Progress = PROGRESS) -> None:
        self._progress = progress

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p = self._progress
        done = GaugeMetricFamily(
            "dap_index_build_done", "work done by the index build under way", labels=["index", "phase"]
        )
        total = GaugeMetricFamily(
            "dap_index_build_total", "work of the index build under way", labels=["index", "phase"]
        )
        if p.index:
            done.add_metric([p.index, p.phase], p.done)
            total.add_metric([p.index, p.phase], p.total)
        builds = CounterMetricFamily("dap_index_builds", "online index builds finished", labels=["result"])
        builds.add_metric(["built"], p.built)
        builds.add_metric(["failed"], p.failed)
        yield from (done, total, builds)
