"""The replication slot of events as logical WAL messages (``DAP_EVENTS_SOURCE=wal``, issue 46).

Made at boot, before any write can emit a message (a slot reads what is committed after it
exists), and by each dispatcher for its own set of tenants; ``wal`` reads it. Apart from ``wal``
so the boot path reaches Postgres without the delivery code (aiohttp, webhooks).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from collections.abc import Iterable

import asyncpg

from dap.server import errors
from dap.server.storage import db

PUBLICATION = "dap_events"  # pgoutput needs one; it publishes no table (messages only)

# the slot's cursor (the end of the last transaction settled), and what a joined write whose row came
# out otherwise than predicted raises (as the outbox's NOT NULL does: ``builtin.refused``)
DDL = """
CREATE TABLE IF NOT EXISTS dap.event_slots (slot text PRIMARY KEY, lsn pg_lsn NOT NULL DEFAULT '0/0');
CREATE OR REPLACE FUNCTION dap.event_refused() RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
  RAISE not_null_violation USING MESSAGE = 'the written row differs from its prediction',
    TABLE = 'outbox', COLUMN = 'payload';
END $$;
"""

# the WAL the events' slots of this database keep (the most of any), and how many Postgres gave up
# (``max_slot_wal_keep_size`` exceeded: wal_status 'lost'; their unread events are gone)
RETAINED = (
    "SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::float8 AS retained, "
    "count(*) FILTER (WHERE wal_status = 'lost')::float8 AS lost FROM pg_replication_slots "
    "WHERE database = current_database() AND slot_name LIKE 'dap\\_events\\_%'"
)


def slot_name(database: str, tenants: Iterable[uuid.UUID] | None = None) -> str:
    """This database's slot (slot names are the server's, a slot reads one database), one per
    set of delivered tenants (resource pods sharing a database each read their own). Pure."""
    base = re.sub(r"[^a-z0-9_]", "_", database.lower())
    if tenants is not None:
        base += "_" + hashlib.sha256(",".join(sorted(str(t) for t in tenants)).encode()).hexdigest()[:8]
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"dap_events_{base[:40]}_{digest}"


async def ensure(conn: db.Connection, slot: str) -> None:
    """The publication, the cursor table and the slot (made outside any transaction: Postgres
    refuses a slot in one that wrote). Raises :class:`NotLogicalError` when ``wal_level`` is not
    ``logical``. A slot made now reads the messages committed from now on: ensure it before the
    first write emits one (at boot)."""
    level = await conn.fetchval("SHOW wal_level")
    if level != "logical":
        raise NotLogicalError(level)
    await db.ensure_platform(conn, __name__, DDL)
    if await conn.fetchval("SELECT 1 FROM pg_publication WHERE pubname = $1", PUBLICATION) is None:
        with contextlib.suppress(asyncpg.DuplicateObjectError):  # another process, just now
            await conn.execute(f"CREATE PUBLICATION {PUBLICATION}")
    if await conn.fetchval("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", slot) is None:
        with contextlib.suppress(asyncpg.DuplicateObjectError):
            await conn.execute("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
    await conn.execute("INSERT INTO dap.event_slots (slot) VALUES ($1) ON CONFLICT DO NOTHING", slot)


class NotLogicalError(errors.BootRefused):
    """Postgres runs without ``wal_level=logical``: it cannot carry events as WAL messages (``dap
    serve`` refuses to boot with this one line)."""

    def __init__(self, level: str | None) -> None:
        super().__init__(
            f"DAP_EVENTS_SOURCE=wal needs Postgres with wal_level=logical, and this one has "
            f"wal_level={level}: set it (ALTER SYSTEM SET wal_level = logical, then restart; on "
            "managed services see docs/events.md) or unset DAP_EVENTS_SOURCE to use the outbox"
        )


async def retained(conn: db.Connection) -> tuple[float, float]:
    """(bytes of WAL the events' slots keep at most, slots lost): the metrics of a dispatcher that
    fell behind (0, 0 without slots: the outbox)."""
    row = await conn.fetchrow(RETAINED)
    return (row["retained"], row["lost"]) if row is not None else (0.0, 0.0)
