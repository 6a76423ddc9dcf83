"""The built-in events of the standard actions, written in the transaction of the write.

Every standard write of an entity emits one event into ``dap.outbox`` (docs/events.md has the
payloads):

==========  ==========  =====================================================================
action      event       payload
==========  ==========  =====================================================================
create      created     ``record`` (the record after the insert, as REST shows it)
update      updated     ``record`` (after), ``changed`` (the names of the fields the body set)
delete      deleted     ``record`` (the record as it was before the delete)
submit      submitted   ``record`` (after: ``docstatus`` submitted)
cancel      cancelled   ``record`` (after: ``docstatus`` cancelled)
==========  ==========  =====================================================================

A create-and-submit emits ``created`` only (its record reads ``docstatus: submitted``). An entity
may declare an event of one of these names in ``spec.events`` to give it ``deliver`` entries or a
``type``; undeclared, the built-in event is still written (websocket subscribers and ``pubsub``
see every change) and is ``async``.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from dap import tracing
from dap.server.catalog import Resource
from dap.server.documents import auditing, reading
from dap.server.events import outbox
from dap.server.storage import db, tables

log = logging.getLogger(__name__)

NAMES = {
    "create": "created",
    "update": "updated",
    "delete": "deleted",
    "submit": "submitted",
    "cancel": "cancelled",
}


def payload(
    write: auditing.Write,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None,
    changed: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The payload of a built-in event (pure)."""
    out: dict[str, Any] = {"record": reading.present(write.resource, row, children)}
    if changed is not None:
        out["changed"] = sorted(changed)
    return out


async def record(
    conn: db.Connection,
    write: auditing.Write,
    action: str,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None = None,
    *,
    changed: Iterable[str] | None = None,
) -> uuid.UUID:
    """Emit the built-in event of ``action`` on ``row`` in the caller's transaction; its public id.

    ``row`` is the record after the write (before it, for ``delete``).
    """
    body = payload(write, row, children, changed)
    return await outbox.emit(
        conn,
        tenant=write.tenant,
        entity=write.resource.key,
        record_id=row["id"],
        action=action,
        event=NAMES[action],
        payload=body,
        actor_sub=write.sub,
        actor_username=write.username,
        request_id=write.request_id,
        version=row["version"],
    )


# --- the event in the write's own statement ----------------------------------------------------
# A write and its event as one statement: one round trip to Postgres instead of two (issue 27).
# The payload is the record as REST shows it, which only Python knows how to present; what only
# the statement knows -- the id a create is given, the version, the two timestamps -- is put into
# it by the statement itself, with the timestamps written as ``fieldvalues.iso_text`` writes them
# (RFC 3339, UTC as ``+00:00``, microseconds only when set).


def _iso(column: str) -> str:
    """SQL: a ``timestamptz`` as the text ``fieldvalues.iso_text`` gives its UTC ``datetime``."""
    return (
        f"to_jsonb(to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        f"extract(microseconds FROM {column})::bigint % 1000000 = 0 THEN '' "
        f"ELSE to_char({column} AT TIME ZONE 'UTC', '.US') END || '+00:00')"
    )


_FILLED = ("id", "version", "created_at", "updated_at")  # written into ``record`` by the statement
_PLACEHOLDER = {  # what the prediction holds for them until the statement writes them
    "id": uuid.UUID(int=0),
    "version": 0,
    "created_at": dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
    "updated_at": dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
}
EVENT_COLUMN = "dap_event"  # the event's public id, beside the record's columns


@dataclass(frozen=True)
class Joined:
    """A write statement joined with its built-in event, and what its outcome is checked against."""

    sql: str
    args: list[Any]
    expected: dict[str, Any]  # the payload the statement writes, before its filled values


@functools.lru_cache(maxsize=1024)
def _joined_sql(
    statement: str, n: int, notify: bool, check: str | None, trace: int, wal: bool = False
) -> str:
    """The text of :func:`joined`'s statement around ``statement`` (with ``n`` parameters of its
    own): built once per statement text, since a table's writes repeat a few column sets.
    ``check``: a condition on the written row ``w`` under which the payload is written; otherwise
    it is null, which ``dap.outbox.payload``'s ``NOT NULL`` refuses (:func:`refused`)."""
    wake = f", pg_notify('{outbox.CHANNEL}', txid_current()::text)" if notify else ""
    record = f"${n + 5}::jsonb"
    if check is not None:
        record = f"CASE WHEN {check} THEN {record} END"
    record = f"jsonb_set({record}, '{{record,id}}', to_jsonb(w.id::text))"
    record = f"jsonb_set({record}, '{{record,version}}', to_jsonb(w.version))"
    record = f"jsonb_set({record}, '{{record,created_at}}', {_iso('w.created_at')})"
    record = f"jsonb_set({record}, '{{record,updated_at}}', {_iso('w.updated_at')})"
    if wal:
        return _messaged(
            statement,
            n,
            notify,
            record,
            [f"${n + k}" + ("::text" if k > 1 else "") for k in (1, 2, 3, 4, 6, 7, 8)],
            trace,
        )
    return (
        f"WITH w AS ({statement}), e AS (INSERT INTO dap.outbox (tenant_id, entity, record_id, action, "
        "event, payload, actor_sub, actor_username, request_id, version, traceparent) "
        f"SELECT ${n + 1}, ${n + 2}, w.id, ${n + 3}, ${n + 4}, {record}, ${n + 6}, ${n + 7}, ${n + 8}, "
        f"w.version, ${trace}::text FROM w RETURNING public_id{wake}) "
        f"SELECT w.*, e.public_id AS {EVENT_COLUMN} FROM w, e"
    )


def _messaged(statement: str, n: int, notify: bool, payload: str, texts: list[str], trace: int) -> str:
    """The statement of :func:`joined` or :func:`written` with ``DAP_EVENTS_SOURCE=wal``: the event
    as a logical message (``outbox.message_sql``) emitted by the final ``SELECT``'s condition, once
    per written row (none when nothing was written), its public id the parameter after the trace
    (made by the caller: a ``MATERIALIZED`` CTE making it, and a ``LATERAL`` emitting, cost the
    statement ~15 µs of Postgres CPU more: docs/performance.md); a null ``payload`` (a failed
    check) raises what the outbox's ``NOT NULL`` would (:func:`refused`). ``texts``: the parameters
    of tenant, entity, action, event, actor sub, username, request id."""
    tenant, entity, action, event, sub, user, request = texts
    id_ = f"${trace + 1}::uuid"
    wake = f" AND pg_notify('{outbox.CHANNEL}', txid_current()::text) IS NOT NULL" if notify else ""
    emitted = outbox.message_sql(
        id_=id_,
        tenant=f"{tenant}::uuid",
        entity=entity,
        record="w.id",
        action=action,
        event=event,
        payload=f"coalesce({payload}, dap.event_refused())",
        version="w.version",
        sub=sub,
        user=user,
        request=request,
        trace=f"${trace}::text",
    )
    # a volatile condition on ``w``'s columns: evaluated for each written row, never folded away
    row = f"SELECT w.*, {id_} AS {EVENT_COLUMN} FROM w"
    return f"WITH w AS ({statement}) {row} WHERE {emitted} IS NOT NULL{wake}"


def joined(
    statement: str,
    args: Sequence[Any],
    write: auditing.Write,
    action: str,
    predicted: Mapping[str, Any],
    *,
    changed: Iterable[str] | None = None,
    notify: bool = True,
    check: Check | None = None,
) -> Joined:
    """``statement`` (an ``INSERT``/``UPDATE`` of one row ``RETURNING`` the record's columns) and the
    built-in event of ``action`` on its row, as one statement returning the row and
    :data:`EVENT_COLUMN`. ``predicted`` is the row as it will be, but for :data:`_FILLED`.

    For a resource without child fields only (the payload carries no child rows). The caller
    checks the outcome with :func:`settle_joined` in the same transaction.

    ``notify`` ``False`` leaves out the ``NOTIFY dap_outbox`` that wakes every process's
    dispatcher: for a caller that wakes its own process's running dispatcher after the commit
    instead. A transaction that NOTIFYs holds a database-wide lock through its commit, so such
    commits (and their WAL flushes) run one at a time (docs/performance.md).

    ``check`` (:func:`matching`, its parameters numbered from ``len(args) + 9``) makes the
    statement fail, writing nothing, when the row comes out
    otherwise than predicted: for a statement committed by itself, whose event cannot be rewritten
    afterwards in the same transaction as :func:`settle_joined` does.
    """
    as_stored = {  # Postgres gives a timestamptz back in UTC
        k: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) and v.tzinfo is not None else v
        for k, v in predicted.items()
    }
    body = payload(write, {**as_stored, **_PLACEHOLDER}, None, changed)
    extra = [
        write.tenant,
        write.resource.key,
        action,
        NAMES[action],
        body,
        write.sub,
        write.username,
        write.request_id,
    ]
    trace = tracing.traceparent()  # the request's trace, for the delivery (last: after the check's)
    wal = outbox.selected()
    made = [uuid.uuid4()] if wal else []  # the message's public id (``_messaged``)
    if check is None:
        text = _joined_sql(statement, len(args), notify, None, len(args) + len(extra) + 1, wal)
        return Joined(text, [*args, *extra, trace, *made], body)
    at = len(args) + len(extra) + len(check.args) + 1
    text = _joined_sql(statement, len(args), notify, check.sql, at, wal)
    return Joined(text, [*args, *extra, *check.args, trace, *made], body)


@dataclass(frozen=True)
class Settled:
    """A joined write's event, and the record it carries as REST presents it (all fields, before
    any caller's view): the answer of the write is the same record, presented once for both."""

    event: uuid.UUID
    record: dict[str, Any]


@dataclass(frozen=True)
class Check:
    """A condition on the written row ``w`` for :func:`joined`, and the parameters it adds."""

    sql: str
    args: list[Any]


def matching(
    resource: Resource, predicted: Mapping[str, Any], placed: Mapping[str, int], first: int
) -> Check:
    """SQL: the row ``w`` holds what ``predicted`` says in every column the event's record shows
    (but :data:`_FILLED`), for :func:`joined`'s ``check``; ``first`` is the number its own
    parameters start at. Pure.

    A column the statement wrote from its parameter ``$k`` (``placed``) is compared as text with
    that parameter (``1.50`` against ``1.5`` differs, as their JSON does), a column predicted null
    must be null, any other with a parameter of its own (the predicted value, of the column's
    type without its modifier, so that nothing rounds it). Stricter than :func:`settle_joined`'s
    comparison of presented records (a stored value equal as text decodes to the value that was
    sent), never looser: a false alarm only costs the caller its transaction path.
    """
    terms: list[str] = []
    args: list[Any] = []
    columns = [column for _, column, _ in reading.shown(resource, "rest") if column is not None]
    columns += ["owner", *(["docstatus"] if resource.lifecycle else [])]
    for column in columns:
        if column in _FILLED:
            continue
        ref = f"w.{tables.quote(column)}"
        value = predicted.get(column)
        if column in placed:
            terms.append(f"{ref}::text IS NOT DISTINCT FROM ${placed[column]}::text")
        elif value is None:
            terms.append(f"{ref} IS NULL")
        else:
            declared = resource.table.column(column)
            assert declared is not None
            base = declared.sql_type.split("(", 1)[0]
            args.append(value)
            terms.append(f"{ref}::text IS NOT DISTINCT FROM (${first + len(args) - 1}::{base})::text")
    return Check(" AND ".join(terms) or "true", args)


def refused(exc: asyncpg.PostgresError) -> bool:
    """The error of a :func:`joined` statement whose ``check`` failed (nothing was written)."""
    return (
        isinstance(exc, asyncpg.NotNullViolationError)
        and getattr(exc, "table_name", None) == "outbox"
        and getattr(exc, "column_name", None) == "payload"
    )


def compared(
    write: auditing.Write, done: Joined, row: asyncpg.Record, *, changed: Iterable[str] | None = None
) -> tuple[Settled, dict[str, Any] | None]:
    """A joined write's event and record, and the payload it should have carried when the row came
    out otherwise than predicted (``None`` when it came out as predicted). Pure."""
    event = row[EVENT_COLUMN]
    assert isinstance(event, uuid.UUID)
    actual = payload(write, row, None, changed)
    expected = {**done.expected, "record": {**done.expected["record"]}}
    for name in _FILLED:
        expected["record"][name] = actual["record"][name]
    settled = Settled(event, dict(actual["record"]))  # a copy: the caller may narrow it for its view
    return settled, (actual if actual != expected else None)


async def settle_joined(
    conn: db.Connection,
    write: auditing.Write,
    done: Joined,
    row: asyncpg.Record,
    *,
    changed: Iterable[str] | None = None,
) -> Settled:
    """The event's public id and record; its payload rewritten (in the caller's transaction) when
    the row came out otherwise than predicted (a column default, a trigger), so that the event
    always carries the record as it is."""
    settled, actual = compared(write, done, row, changed=changed)
    if actual is not None:
        log.debug(
            "event payload rewritten: the row differs from its prediction",
            extra={"ctx": {"event": str(settled.event)}},
        )
        await conn.execute(outbox.rewrite_sql(), actual, settled.event)
    return settled


# --- the event's record written by the statement from the row itself -------------------------
# For a table whose every shown column Postgres can write as JSON exactly as ``reading.present``
# does (text, integers, booleans, uuids, exact numbers, dates, timestamps), the statement builds
# the event's ``record`` from the row it wrote: nothing is predicted, nothing can differ from the
# row (a trigger, a default, a rounding), so there is no check to refuse and no payload to
# rewrite -- and an update needs no read of its record first (``recording._update_blind``).
# Any other column type (a float, a time, JSON, a set of values, a masked field, child rows)
# keeps the prediction (:func:`joined`).

_RENDERED_AS_IS = frozenset({"text", "bigint", "boolean"})  # to_jsonb writes them as JSON does
_SYSTEM = frozenset({"id", "version", "created_at", "updated_at", "owner", "docstatus"})
_renderings: dict[int, tuple[Resource, str | None]] = {}  # id(resource) -> (resource, SQL)


def _rendered(sql_type: str, ref: str) -> str | None:
    """SQL: the JSON of column ``ref`` as ``fieldvalues.converter`` and the JSON encoder give it, or
    ``None`` for a type whose text Postgres writes otherwise. Pure."""
    if sql_type in _RENDERED_AS_IS:
        return f"to_jsonb({ref})"
    if sql_type == "uuid" or sql_type.startswith("numeric"):  # str(uuid), format(Decimal, "f")
        return f"to_jsonb({ref}::text)"
    if sql_type == "date":  # isoformat: Python's dates are years 1-9999
        return f"to_jsonb(to_char({ref}, 'YYYY-MM-DD'))"
    if sql_type == "timestamptz":
        return _iso(ref)
    return None


def _rendering_of(resource: Resource) -> str | None:
    pairs: list[tuple[str, str]] = []
    for name, column, _ in reading.shown(resource, "rest"):
        if column is None:  # child rows: read after the write, never in its statement
            return None
        if name in _SYSTEM:
            continue
        f = resource.fields.get(name)
        declared = resource.table.column(column)
        if f is None or declared is None or f.masked or f.multiple:
            return None
        value = _rendered(declared.sql_type, f"w.{tables.quote(column)}")
        if value is None:
            return None
        pairs.append((name, value))
    pairs += [
        ("id", "to_jsonb(w.id::text)"),
        ("version", "to_jsonb(w.version)"),
        ("created_at", _iso("w.created_at")),
        ("updated_at", _iso("w.updated_at")),
        ("owner", "to_jsonb(w.owner)"),
    ]
    if resource.lifecycle:
        states = ", ".join(f"'{s}'" for s in tables.DOCSTATUS)
        pairs.append(("docstatus", f"to_jsonb((ARRAY[{states}])[w.docstatus + 1])"))
    chunks = [pairs[i : i + 40] for i in range(0, len(pairs), 40)]  # a function takes 100 arguments
    return " || ".join(
        "jsonb_build_object(" + ", ".join(f"'{n.replace(chr(39), chr(39) * 2)}', {v}" for n, v in chunk) + ")"
        for chunk in chunks
    )


def rendering(resource: Resource) -> str | None:
    """SQL: the event's ``record`` built from the written row ``w`` exactly as
    ``reading.present`` presents it (REST's surface, no child rows); ``None`` when a shown column
    is of a type this cannot write exactly. Built once per resource."""
    found = _renderings.get(id(resource))
    if found is not None and found[0] is resource:
        return found[1]
    if len(_renderings) > 512:  # catalogs replaced many times over: forget the old ones
        _renderings.clear()
    text = _rendering_of(resource)
    _renderings[id(resource)] = (resource, text)
    return text


@functools.lru_cache(maxsize=1024)
def _written_sql(
    statement: str, n: int, notify: bool, record: str, changed: bool, trace: int, wal: bool = False
) -> str:
    """The text of :func:`written`'s statement around ``statement`` (``n`` parameters of its own)."""
    wake = f", pg_notify('{outbox.CHANNEL}', txid_current()::text)" if notify else ""
    body = f"jsonb_build_object('record', {record}"
    # the changed names as JSON text written by orjson: a jsonb parameter goes through the codec's
    # ``json.dumps`` (160 bytecodes of every update), a text[] through asyncpg's ABC checks (40)
    body += f", 'changed', ${n + 8}::text::jsonb)" if changed else ")"
    if wal:
        return _messaged(
            statement,
            n,
            notify,
            body,
            [f"${n + k}" + ("::text" if k > 1 else "") for k in (1, 2, 3, 4, 5, 6, 7)],
            trace,
        )
    return (
        f"WITH w AS ({statement}), e AS (INSERT INTO dap.outbox (tenant_id, entity, record_id, action, "
        "event, payload, actor_sub, actor_username, request_id, version, traceparent) "
        f"SELECT ${n + 1}, ${n + 2}, w.id, ${n + 3}, ${n + 4}, {body}, ${n + 5}, ${n + 6}, ${n + 7}, "
        f"w.version, ${trace}::text FROM w RETURNING public_id{wake}) "
        f"SELECT w.*, e.public_id AS {EVENT_COLUMN} FROM w, e"
    )


def written(
    statement: str,
    args: Sequence[Any],
    write: auditing.Write,
    action: str,
    record: str,
    *,
    changed: Iterable[str] | None = None,
    notify: bool = True,
) -> tuple[str, list[Any]]:
    """``statement`` (an ``INSERT``/``UPDATE`` of one row ``RETURNING`` the record's columns) and
    the built-in event of ``action`` on its row, whose ``record`` the statement writes from the row
    (``record``: :func:`rendering`'s SQL), as one statement returning the row and
    :data:`EVENT_COLUMN`; ``(sql, args)``. Pure. ``notify``: as for :func:`joined`."""
    extra: list[Any] = [
        write.tenant,
        write.resource.key,
        action,
        NAMES[action],
        write.sub,
        write.username,
        write.request_id,
    ]
    if changed is not None:
        extra.append(orjson.dumps(sorted(changed)).decode())
    extra.append(tracing.traceparent())  # the request's trace, for the delivery
    wal = outbox.selected()
    at = len(args) + len(extra)  # the trace's parameter
    text = _written_sql(statement, len(args), notify, record, changed is not None, at, wal)
    return text, [*args, *extra, *([uuid.uuid4()] if wal else [])]  # the message's id (``_messaged``)


def event_of(row: asyncpg.Record) -> uuid.UUID:
    """The event's public id beside a written row (:data:`EVENT_COLUMN`)."""
    event = row[EVENT_COLUMN]
    assert isinstance(event, uuid.UUID)
    return event
