"""``dap.outbox``: every event, written in the transaction of the change that caused it.

A write that emits an event inserts one row here before its transaction commits, so the event
exists exactly when the change does (the transactional outbox pattern), and queues one
``NOTIFY dap_outbox`` whose payload is the transaction id: Postgres folds identical notifications
of one transaction, so a transaction that emits many events wakes the dispatchers once, and the
payload carries no data (dispatchers read the rows). Columns:

``id`` (bigserial: per record, the order of the record's changes), ``public_id`` (uuid, the
event's id for consumers and the ``webhook-id``), ``tenant_id``, ``entity`` (``module/name``),
``record_id`` (null for a service action), ``action``, ``event``, ``payload`` (jsonb: ``record``
after the change, ``params``, ``from``/``to`` for a transition), ``version`` (the record's version
after the change), ``actor_sub``, ``actor_username``, ``request_id``, ``created_at``,
``delivered_at`` (null until every delivery is settled), ``attempts`` (failed rounds),
``next_at`` (not claimed before), ``last_error``, ``traceparent`` (W3C: the span that wrote it, whose trace
its deliveries join; null with tracing off), ``seq`` (the feed position, given at delivery in
commit order: see ``dispatcher``) and ``consumers`` (null: every delivery; a replay names one).

Companions: ``dap.event_deliveries`` (one row per settled delivery, unique ``(consumer,
event_id)``: a delivery already settled is never repeated, and a ``reliable_event``'s effect
commits together with its row), ``dap.dead_letter`` and ``dap.notifications``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

from dap import tracing
from dap.server.storage import db

PREFIX = "dap.events"  # the logical messages' prefix (``DAP_EVENTS_SOURCE=wal``: ``wal``)
SOURCE_ENV = "DAP_EVENTS_SOURCE"  # "outbox" (default) or "wal"
CHANNEL = "dap_outbox"  # NOTIFY: new rows (payload: the emitting transaction's id)
FEED = "dap_feed"  # NOTIFY: rows delivered (payload: the highest seq of the transaction)

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.outbox (
    id bigserial PRIMARY KEY,
    public_id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    entity text NOT NULL,
    record_id uuid,
    action text NOT NULL,
    event text NOT NULL,
    payload jsonb NOT NULL,
    actor_sub text,
    actor_username text,
    request_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_undelivered ON dap.outbox (id) WHERE delivered_at IS NULL;
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS version bigint;
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS next_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS last_error text;
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS seq bigint;
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS consumers text[];
-- the W3C traceparent of the span that wrote the event (NULL: tracing off): its deliveries join it
ALTER TABLE dap.outbox ADD COLUMN IF NOT EXISTS traceparent text;
CREATE INDEX IF NOT EXISTS outbox_record_undelivered ON dap.outbox (tenant_id, record_id, id)
    WHERE delivered_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS outbox_seq ON dap.outbox (seq) WHERE seq IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS dap.outbox_feed_seq;
-- a queue table: every row is updated once and deleted once, so vacuum it by a fixed number of
-- dead rows rather than a share of a table that stays small; inserts leave half of each page free,
-- so that a row's delivery (the update that sets ``delivered_at`` and ``seq``) writes its new
-- version on the same page, and Postgres logs only the changed bytes of it instead of the whole
-- row, payload included (a third less WAL per event: docs/performance.md)
ALTER TABLE dap.outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05, fillfactor = 50);
CREATE TABLE IF NOT EXISTS dap.event_deliveries (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    outcome text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE TABLE IF NOT EXISTS dap.dead_letter (
    id bigserial PRIMARY KEY,
    public_id uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    outbox_id bigint NOT NULL,
    event_id uuid NOT NULL,
    tenant_id uuid NOT NULL,
    entity text NOT NULL,
    event text NOT NULL,
    consumer text NOT NULL,
    channel text NOT NULL,
    attempts integer NOT NULL,
    last_error text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    replayed_at timestamptz
);
ALTER TABLE dap.dead_letter ADD COLUMN IF NOT EXISTS settled_as uuid;
CREATE TABLE IF NOT EXISTS dap.notifications (
    id bigserial PRIMARY KEY,
    public_id uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    tenant_id uuid NOT NULL,
    username text NOT NULL,
    event_id uuid NOT NULL,
    entity text NOT NULL,
    record_id uuid,
    event text NOT NULL,
    subject text,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    read_at timestamptz,
    UNIQUE (tenant_id, username, event_id, body)
);
CREATE INDEX IF NOT EXISTS notifications_user ON dap.notifications (tenant_id, username, id DESC);
"""
_INSERT = (
    "WITH added AS (INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, "
    "actor_sub, actor_username, request_id, version, traceparent) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING public_id) "
    f"SELECT public_id, pg_notify('{CHANNEL}', txid_current()::text) FROM added"
)


SOURCES = ("outbox", "wal", "wal-sql")


def source() -> str:
    """``DAP_EVENTS_SOURCE``: ``outbox`` (rows), ``wal`` (WAL messages read by a walsender stream:
    ``walstream``) or ``wal-sql`` (the same messages read by the slot's SQL functions: ``wal``)."""
    found = os.environ.get(SOURCE_ENV, "outbox").strip().lower()
    if found not in SOURCES:
        raise ValueError(f"{SOURCE_ENV} must be one of {', '.join(SOURCES)}, not {found!r}")
    return found


def selected() -> bool:
    """Whether events travel as WAL messages (``wal``, ``wal-sql``) rather than outbox rows."""
    return source() != "outbox"


# --- events as logical WAL messages (``DAP_EVENTS_SOURCE=wal``) ----------------------------------------


def message_sql(
    *,
    id_: str,
    tenant: str,
    entity: str,
    record: str,
    action: str,
    event: str,
    payload: str,
    version: str,
    sub: str,
    user: str,
    request: str,
    trace: str,
) -> str:
    """SQL: ``pg_logical_emit_message`` of one event, from SQL expressions for its fields. Pure.
    The message is ``json``'s text, not ``jsonb``'s: nothing reads it but a JSON parser, and the
    ``jsonb`` value would be built only to be printed."""
    return (
        f"pg_logical_emit_message(true, '{PREFIX}', json_build_object('id', {id_}, 'tenant', {tenant}, "
        f"'entity', {entity}, 'record', {record}, 'action', {action}, 'event', {event}, "
        f"'payload', {payload}, 'version', {version}, 'sub', {sub}, 'user', {user}, "
        f"'request', {request}, 'trace', {trace}, 'at', extract(epoch FROM now()))::text)"
    )


REWRITE = (
    f"SELECT pg_logical_emit_message(true, '{PREFIX}', "
    "jsonb_build_object('fix', $2::uuid, 'payload', $1::jsonb)::text)"
)


def rewrite_sql() -> str:
    """SQL ($1 payload, $2 public id): a just-emitted event's payload replaced, in its transaction."""
    return REWRITE if selected() else "UPDATE dap.outbox SET payload = $1 WHERE public_id = $2"


# one event as a message, in its own statement (``emit``): its public id made by the statement
_EMIT = (
    "WITH e AS MATERIALIZED (SELECT gen_random_uuid() AS public_id) "
    "SELECT e.public_id FROM e, LATERAL (SELECT "
    + message_sql(
        id_="e.public_id",
        tenant="$1::uuid",
        entity="$2::text",
        record="$3::uuid",
        action="$4::text",
        event="$5::text",
        payload="$6::jsonb",
        sub="$7::text",
        user="$8::text",
        request="$9::text",
        version="$10::bigint",
        trace="$11::text",
    )
    + f", pg_notify('{CHANNEL}', txid_current()::text)) m"
)


BACKLOG = (
    "SELECT count(*)::float8 AS pending, "
    "coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest "
    "FROM dap.outbox WHERE delivered_at IS NULL"
)


async def backlog(conn: db.Connection) -> tuple[float, float]:
    """(undelivered events, age in seconds of the oldest): the metrics' event backlog and lag."""
    row = await conn.fetchrow(BACKLOG)
    return (row["pending"], row["oldest"]) if row is not None else (0.0, 0.0)


def _version(payload: Mapping[str, Any]) -> int | None:
    record = payload.get("record")
    found = record.get("version") if isinstance(record, Mapping) else None
    return found if isinstance(found, int) else None


def emit_args(
    *,
    tenant: uuid.UUID,
    entity: str,
    record_id: uuid.UUID | None,
    action: str,
    event: str,
    payload: Mapping[str, Any],
    actor_sub: str,
    actor_username: str,
    request_id: str | None,
    version: int | None = None,
) -> tuple[Any, ...]:
    """The eleven arguments of one event, in the order of :func:`emit`'s and :func:`folded`'s SQL."""
    return (
        tenant,
        entity,
        record_id,
        action,
        event,
        dict(payload),
        actor_sub,
        actor_username,
        request_id,
        version if version is not None else _version(payload),
        tracing.traceparent(),
    )


async def emit(
    conn: db.Connection,
    *,
    tenant: uuid.UUID,
    entity: str,
    record_id: uuid.UUID | None,
    action: str,
    event: str,
    payload: Mapping[str, Any],
    actor_sub: str,
    actor_username: str,
    request_id: str | None,
    version: int | None = None,
) -> uuid.UUID:
    """Insert one event in the caller's transaction (and queue its NOTIFY); its public id. With
    ``DAP_EVENTS_SOURCE=wal``, a logical message instead of the row."""
    args = emit_args(
        tenant=tenant,
        entity=entity,
        record_id=record_id,
        action=action,
        event=event,
        payload=payload,
        actor_sub=actor_sub,
        actor_username=actor_username,
        request_id=request_id,
        version=version,
    )
    found = await conn.fetchrow(_EMIT if selected() else _INSERT, *args)
    assert found is not None
    assert isinstance(found["public_id"], uuid.UUID)
    return found["public_id"]


def folded(n: int, gate: str) -> tuple[list[str], str]:
    """SQL: one event emitted inside a larger statement, once per row of its CTE ``gate`` (none
    when ``gate`` has none), its :func:`emit_args` as ``$n+1`` to ``$n+11``: the CTEs to add to
    that statement's ``WITH`` and an expression its final ``SELECT`` must include (a CTE that only
    reads, as the NOTIFY's and the WAL message's would, is not run unless referenced). Pure."""
    p = [f"${n + i}" for i in range(1, 12)]
    casts = ("uuid", "text", "uuid", "text", "text", "jsonb", "text", "text", "text", "bigint", "text")
    a = [f"{x}::{t}" for x, t in zip(p, casts, strict=True)]
    notify = f"pg_notify('{CHANNEL}', txid_current()::text)"
    if selected():
        message = message_sql(
            id_="gen_random_uuid()",
            tenant=a[0],
            entity=a[1],
            record=a[2],
            action=a[3],
            event=a[4],
            payload=a[5],
            sub=a[6],
            user=a[7],
            request=a[8],
            version=a[9],
            trace=a[10],
        )
        return [], f"(SELECT count({message}) + count({notify}) FROM {gate})"
    cte = (
        "event AS (INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, "
        f"actor_sub, actor_username, request_id, version, traceparent) SELECT {', '.join(a)} FROM {gate} "
        "RETURNING public_id)"
    )
    return [cte], f"(SELECT count({notify}) FROM event)"


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)
