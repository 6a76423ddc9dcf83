"""Events as logical WAL messages (``DAP_EVENTS_SOURCE=wal``, issue 46): emitted, read, settled.

With the outbox (the default), every write inserts a ``dap.outbox`` row that the dispatcher
claims, updates and later deletes: the event cost Postgres more than the row it describes
(docs/performance.md). Here the write instead calls ``pg_logical_emit_message(true,
'dap.events', ...)`` in its own statement: one WAL record, atomic with the row, no table, no
index, no vacuum. Logical decoding (``pgoutput`` with ``messages``) gives the messages back in
commit order through a replication slot of this database (:func:`slot_name`).

**Reading** (:func:`drain`, called by the dispatcher): in one transaction, the slot's cursor row
in ``dap.event_slots`` is locked (``FOR UPDATE``: a second dispatcher waits there, so the slot
has one consumer at a time -- the leader), the slot is *peeked* (nothing consumed), the messages
of transactions committed after the cursor are delivered by the dispatcher's own delivery code
(:meth:`Dispatcher.deliver`, the same as the outbox's), and then, in that same transaction:

- every event is written into ``dap.outbox`` as the feed's log: delivered ones with
  ``delivered_at`` and their ``seq`` (commit order, under the feed lock), so the feed, websocket
  resume with ``after``, sync waiters and dead-letter replay read what they read today;
- an event whose delivery failed goes in undelivered, with its attempt, error and ``next_at``:
  the retry record, which the outbox path of the same dispatcher claims when it falls due; a
  record's later events (in the batch, or with an undelivered row already) go in behind it,
  undelivered, so a record's order holds;
- the cursor moves to the last commit read.

The slot itself is advanced to the cursor (``pg_replication_slot_advance``) at the start of the
process's next round, under the lock (never inside the round that may still roll back). A
process killed before that leaves the slot behind the cursor: the next round skips what the
cursor covers and advances the slot past it. Killed before the commit, nothing is recorded and
the batch is read again (at least once, the same ids; settled deliveries are never repeated:
``dap.event_deliveries``).

A payload rewritten after its write (``rewrite``: a row that came out otherwise than predicted)
is a second message naming the first's id in the same transaction; the reader keeps the last.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import orjson

from dap.server.events import channels, outbox, slots
from dap.server.storage import db

PREFIX = outbox.PREFIX
PUBLICATION = slots.PUBLICATION

PEEK = (
    "SELECT lsn::text AS lsn, data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2, "
    f"'proto_version', '1', 'publication_names', '{PUBLICATION}', 'messages', 'true')"
)
# the cursor, and the WAL flushed so far: a peek that finds nothing has seen every transaction that
# committed below it (the peek reads to the flush), so the slot may move there (see ``drain``)
# ``redo``: the WAL each peek decodes again before what it returns. A peek starts at the slot's
# ``restart_lsn``, which moves only past a running-transactions record (the bgwriter writes one
# every 15 s): between two, every peek decoded all the WAL since the last one again, and the
# decoding cost grew with the write rate times 15 s (docs/performance.md, issue 46).
CURSOR = (
    "SELECT s.lsn::text AS cursor, pg_current_wal_flush_lsn()::text AS flushed, "
    "(SELECT pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn) FROM pg_replication_slots "
    "WHERE slot_name = $1)::float8 AS redo FROM dap.event_slots s WHERE s.slot = $1 FOR UPDATE OF s"
)
REDO = 1 << 20  # bytes decoded again per peek beyond which a running-transactions record is logged
SNAPSHOT = "SELECT pg_log_standby_snapshot()"
MOVE = "UPDATE dap.event_slots SET lsn = $2::text::pg_lsn WHERE slot = $1"
ADVANCE = (
    "SELECT pg_replication_slot_advance(slot_name, $2::text::pg_lsn) FROM pg_replication_slots "
    "WHERE slot_name = $1 AND confirmed_flush_lsn < $2::text::pg_lsn"
)
HELD = (
    "SELECT DISTINCT tenant_id, record_id FROM dap.outbox WHERE delivered_at IS NULL "
    "AND record_id = ANY($1::uuid[])"
)
IDS = "SELECT nextval('dap.outbox_id_seq') FROM generate_series(1, $1)"
# the batch's events into the outbox in id (commit) order: delivered ones with their feed position
WRITE = """
WITH x AS (SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::uuid[], $4::text[], $5::uuid[], $6::text[],
    $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::text[], $13::timestamptz[],
    $14::text[], $15::bool[], $16::int[], $17::text[], $18::float8[])
  AS t(id, public_id, tenant_id, entity, record_id, action, event, payload, version, actor_sub,
    actor_username, request_id, created_at, traceparent, delivered, attempts, last_error, wait)
  ORDER BY id),
i AS (INSERT INTO dap.outbox (id, public_id, tenant_id, entity, record_id, action, event, payload, version,
    actor_sub, actor_username, request_id, created_at, traceparent, delivered_at, seq, attempts,
    last_error, next_at)
  SELECT id, public_id, tenant_id, entity, record_id, action, event, payload::jsonb, version, actor_sub,
    actor_username, request_id, created_at, traceparent, CASE WHEN delivered THEN now() END,
    CASE WHEN delivered THEN nextval('dap.outbox_feed_seq') END, attempts, last_error,
    now() + make_interval(secs => wait)
  FROM x ORDER BY id RETURNING seq)
SELECT pg_notify($19, max(seq)::text) FROM i WHERE seq IS NOT NULL
"""
# --- reading ---------------------------------------------------------------------------------


class Reader(Protocol):
    """What :func:`drain` needs of the dispatcher (``dispatcher.Dispatcher``)."""

    slot_last: str | None  # the end of what its last round committed (None: nothing)
    handed: int  # events handed to the outbox (retries, held back) since it last claimed it
    feed_lock: int
    feed_channel: str
    snapshots: bool  # may log running-transactions records (``pg_log_standby_snapshot``: superuser)

    @property
    def tenants(self) -> frozenset[uuid.UUID] | None: ...

    async def deliver(
        self,
        conn: db.Connection,
        events: list[channels.Event],
        held: set[tuple[uuid.UUID, uuid.UUID | None]],
        payloads: dict[int, str] | None = None,
    ) -> dict[int, tuple[str | None, float]]: ...


@dataclass(frozen=True)
class Read:
    """What a peek gave: the events of the transactions after the cursor, in commit order, and
    the end of the last transaction read (``None``: none)."""

    events: list[dict[str, Any]]
    last: str | None
    rows: int


def lsn_value(lsn: str) -> int:
    high, _, low = lsn.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def message(data: bytes) -> tuple[str, bytes] | None:
    """A pgoutput (v1) ``M`` message's prefix and content; ``None`` for any other message. Pure."""
    if not data or data[0:1] != b"M":
        return None
    end = data.index(b"\0", 10)  # type, flags, lsn (8 bytes), then the prefix
    (size,) = struct.unpack_from("!i", data, end + 1)
    return data[10:end].decode(), bytes(data[end + 5 : end + 5 + size])


def parse(rows: Iterable[Any], after: str) -> Read:
    """The events of the peeked ``rows`` whose transaction ends after ``after`` (the cursor), a
    transaction's payload rewrites folded into its events. Pure."""
    floor = lsn_value(after)
    events: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    last: str | None = None
    count = 0
    for row in rows:
        count += 1
        data = bytes(row["data"])
        kind = data[0:1]
        if kind == b"B":
            pending = []
        elif kind == b"C":
            if lsn_value(row["lsn"]) > floor:
                events.extend(pending)
                last = row["lsn"]
            pending = []
        else:
            found = message(data)
            if found is None or found[0] != PREFIX:
                continue
            fold(pending, orjson.loads(found[1]))
    return Read(events, last, count)


def fold(pending: list[dict[str, Any]], body: dict[str, Any]) -> None:
    """``body`` (one message of a transaction) into ``pending`` (its events so far): an event, or
    a rewrite of an earlier one's payload (``fix``). Pure but for ``pending``."""
    if "fix" in body:
        for earlier in pending:
            if earlier["id"] == body["fix"]:
                earlier["payload"] = body["payload"]
    else:
        pending.append(body)


def event_of(body: Mapping[str, Any], id_: int) -> channels.Event:
    """The dispatcher's event of one message, numbered ``id_`` (its outbox row's id). Pure."""
    record = body.get("record")
    return channels.Event(
        id_,
        uuid.UUID(body["id"]),
        uuid.UUID(body["tenant"]),
        body["entity"],
        uuid.UUID(record) if record else None,
        body["action"],
        body["event"],
        body["payload"],
        body.get("version"),
        body.get("sub"),
        body.get("user"),
        body.get("request"),
        dt.datetime.fromtimestamp(body["at"], dt.UTC),  # the write's now(), in epoch seconds
        0,
        None,
        body.get("trace"),
    )


async def drain(
    dispatcher: Reader, conn: db.Connection, slot: str, batch: int
) -> tuple[int, bool, str | None]:
    """One round of the slot in the caller's transaction (see the module); (events read, whether
    more may wait, the end of the last transaction read). Once the caller committed, that end is
    its ``slot_last``: the next round advances the slot to it first, under the cursor's lock
    (slot functions of two processes at once fail: "replication slot ... is active")."""
    found = await conn.fetchrow(CURSOR, slot)
    if found is None:
        raise RuntimeError(f"no cursor row for the events slot {slot}: it was not ensured at boot")
    after = found["cursor"]
    if dispatcher.slot_last is not None:  # what this process's last round committed: released
        await conn.execute(ADVANCE, slot, dispatcher.slot_last)
        dispatcher.slot_last = None
    floor = lsn_value(after)
    read = parse(await conn.fetch(PEEK, slot, 4 * batch), after)  # B, M, C: 3 rows an event alone
    if (found["redo"] or 0) > REDO and dispatcher.snapshots:
        try:  # the slot's restart_lsn may move past it at the next advance
            async with conn.transaction():
                await conn.execute(SNAPSHOT)
        except asyncpg.InsufficientPrivilegeError:
            dispatcher.snapshots = False  # not a superuser (a managed service): the bgwriter's, 15 s
    if read.last is None and (read.rows or lsn_value(found["flushed"]) > floor):
        # nothing new: the slot behind the cursor (a process killed between its commit and its
        # advance) gave back only what the cursor covers, or only transactions without events
        # came since; past them now (both committed: safe inside this transaction), or a gap
        # wider than a batch would stall the slot, and every peek would decode them again
        await conn.execute(ADVANCE, slot, after if read.rows else found["flushed"])
    count = await settle(dispatcher, conn, read.events)
    if read.last is not None:
        await conn.execute(MOVE, slot, read.last)
    return count, read.rows >= 4 * batch, read.last


async def settle(dispatcher: Reader, conn: db.Connection, read: list[dict[str, Any]]) -> int:
    """The events ``read`` (in commit order) delivered in the caller's transaction, and written
    into ``dap.outbox``: delivered, or as retry records (see the module); how many were this
    dispatcher's tenants'. The part both readers share (this module's peek, ``walstream``)."""
    tenants = dispatcher.tenants
    bodies = [b for b in read if tenants is None or uuid.UUID(b["tenant"]) in tenants]
    if bodies:
        ids = [r[0] for r in await conn.fetch(IDS, len(bodies))]
        events = [event_of(b, i) for b, i in zip(bodies, ids, strict=True)]
        records = list({e.record_id for e in events if e.record_id is not None})
        held = (
            {(r["tenant_id"], r["record_id"]) for r in await conn.fetch(HELD, records)} if records else set()
        )
        outcome = await dispatcher.deliver(conn, events, held)
        await conn.execute("SELECT pg_advisory_xact_lock($1)", dispatcher.feed_lock)
        columns: list[list[Any]] = [[] for _ in range(18)]
        for event, body in zip(events, bodies, strict=True):
            failed = outcome.get(event.id)
            values = (
                event.id,
                event.public_id,
                event.tenant,
                event.entity,
                event.record_id,
                event.action,
                event.event,
                orjson.dumps(body["payload"]).decode(),
                event.version,
                event.actor_sub,
                event.actor_username,
                event.request_id,
                event.created_at,
                event.traceparent,
                failed is None,
                1 if failed and failed[0] is not None else 0,
                failed[0] if failed else None,
                failed[1] if failed else 0.0,
            )
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        await conn.execute(WRITE, *columns, dispatcher.feed_channel)
        dispatcher.handed += sum(1 for e in events if e.id in outcome)
    return len(bodies)
