"""Evidence out of the pod: the sender, and the measurements behind health and metering.

:class:`Sender` owns the bounded ``evidence.Buffer``. Records are added synchronously by the
pull loop (so a convergence step never waits for the network) and flushed by a background task
every ``evidence_interval`` seconds or at once when something is added. A batch the control
plane cannot take right now (unreachable, 5xx) goes back to the front of the buffer and is
retried with backoff; a batch it refuses outright (4xx: a bug in this pod, since records are
built to the documented shape) is dropped with an error log so that it cannot block the queue.

The measurements are I/O against the server's pool and metrics: ``check_postgres`` (health),
``usage`` (metering: requests since the last period, rows and storage bytes of the workspace
across its tables).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

import asyncpg

from dap import server
from dap.resource_pod import backoff, errors, evidence, fetching, timing
from dap.server import metrics
from dap.server.storage import db, tables

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 2.0


class Sender:
    def __init__(
        self,
        client: fetching.Client,
        *,
        capacity: int,
        interval: float,
        retry: backoff.Backoff,
    ) -> None:
        self.client = client
        self.buffer = evidence.Buffer(capacity)
        self.interval = interval
        self.retry = retry
        self.sent = 0
        self.failures = 0
        self.last_error: str | None = None
        self._added = asyncio.Event()

    def add(self, record: evidence.Record | None) -> None:
        if record is None:
            return
        before = self.buffer.dropped
        self.buffer.add(record)
        if self.buffer.dropped > before:
            log.warning(
                "evidence buffer full: oldest record dropped",
                extra={"ctx": {"dropped_total": self.buffer.dropped, "capacity": self.buffer.capacity}},
            )
        self._added.set()

    async def flush(self) -> bool:
        """Send everything buffered; ``False`` when the control plane could not take it."""
        while len(self.buffer):
            batch = self.buffer.take(evidence.MAX_BATCH)
            try:
                await self.client.send_evidence(batch)
            except errors.ControlUnreachable as exc:
                self.buffer.put_back(batch)
                self.failures += 1
                self.last_error = str(exc)
                return False
            except errors.ProtocolError as exc:
                log.error(
                    "evidence batch refused by the control plane; dropped",
                    extra={"ctx": {"records": len(batch), "error": str(exc)}},
                )
                self.last_error = str(exc)
                continue
            self.sent += len(batch)
            self.failures = 0
            self.last_error = None
        return True

    async def run(self) -> None:
        """Flush forever: on every addition (at most every ``interval``), backing off on failure."""
        while True:
            await timing.wait_event(self._added, self.interval)
            self._added.clear()
            if await self.flush():
                await asyncio.sleep(min(self.interval, 0.05))  # gather a burst into one batch
                continue
            delay = self.retry.delay(self.failures, random.random())
            log.info(
                "evidence not sent; retrying later",
                extra={
                    "ctx": {
                        "buffered": len(self.buffer),
                        "retry_in": round(delay, 2),
                        "error": self.last_error,
                    }
                },
            )
            await asyncio.sleep(delay)


async def check_postgres(pool: asyncpg.Pool) -> str | None:
    """``None`` when Postgres answers, else a short reason."""
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT), db.connection(pool) as conn:
            await conn.fetchval("SELECT 1")
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"postgres unreachable: {type(exc).__name__}"
    return None


def requests_total(meter: metrics.Metrics, workspace: str) -> float:
    """Requests answered for ``workspace`` since the server started (all routes, all statuses)."""
    return float(meter.requests_of(workspace))


async def usage(pool: asyncpg.Pool, catalog: server.Catalog, tenant_id: uuid.UUID) -> dict[str, float]:
    """Rows and storage bytes of one tenant across the tables of ``catalog``."""
    rows = 0.0
    size = 0.0
    async with db.connection(pool) as conn:
        for table in catalog.tables:
            name = tables.quote(table.name)
            try:
                record = await conn.fetchrow(
                    f"SELECT count(*) AS n, coalesce(sum(pg_column_size(t.*)), 0) AS bytes "
                    f"FROM {name} t WHERE tenant_id = $1",
                    tenant_id,
                )
            except asyncpg.UndefinedTableError:
                continue  # not migrated yet: nothing stored
            if record is not None:
                rows += float(record["n"])
                size += float(record["bytes"])
    return {"rows": rows, "storage_bytes": size}
