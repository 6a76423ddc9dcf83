"""Accounting periods: which transaction dates a write may still touch. One rule below the protocols.

A workspace's periods (``dap.periods``: a name, a first and a last day, a state) close date
ranges for every transaction entity (``characteristic: transaction`` with a transaction date,
``EntitySpec.transaction_date_field``). A write of such a record -- create, update, submit,
cancel, delete, whichever protocol, seed or import sent it -- whose transaction date falls in a
period is judged by the period's state (:func:`judge`):

- ``open``: allowed;
- ``closing``: allowed only to a caller holding :data:`POST_CLOSING` (the closers finish the
  month while everyone else is kept out), else 422 ``SVC.PERIOD.CLOSED``;
- ``closed``: 422 ``SVC.PERIOD.CLOSED`` for everyone, admin included; the message names the
  period and what to do (date the write in an open period, or ask a holder of :data:`CLOSE` to
  reopen it).

An update is judged on the date it had and on the date it gets: moving a record out of a closed
period changes that period too.

The check and the close are serialised by a lock per period (:data:`LOCK`, ``dap.period_of``):
every checked write finds its period and holds a *shared* transaction-scoped advisory lock on it
to its commit, then reads the period's state under the lock -- a create inside its very
``INSERT`` (:func:`fold`, ``dap.period_open``), so it costs no statement; an update, submit,
cancel or delete one statement beside the row it locks anyway. A move of the period (close,
reopen) takes the *exclusive* lock first (:data:`EXCLUSIVE`), which waits for the writes holding
it and makes every write that comes after wait for the move's commit and then read the period as
closed. An advisory lock rather than ``FOR SHARE`` on the period's row: concurrent shared row locks
rewrite the row's lockers (a MultiXact) on every write, so writers of one month queued on one tuple
(measured: 0.55x the creates/s of a master entity; docs/performance.md). So no write dated in a period commits
after the period's close (``tests/server/test_periods_race.py``). A date no period covers is open
but still holds the workspace's periods shared (:data:`CREATING`): a period is created only once
the writes already checked have committed, so none of them can commit after the new period's
close either.

The pure decision is :func:`judge`; :func:`guard` is its thin shell over Postgres. Managing the
periods (create, close, reopen, their audit rows) is ``dap.server.workflows.periods``.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.config.entities import EntitySpec
from dap.config.enums import Characteristic
from dap.server import errors, fieldvalues
from dap.server.access import txdates
from dap.server.storage import db

CLOSED = "SVC.PERIOD.CLOSED"
REOPEN_DENIED = "SVC.PERIOD.REOPEN_DENIED"
POST_CLOSING = "dap.periods.post_closing"  # may write in a period that is closing
CLOSE = "dap.periods.close"  # may create, close and reopen periods
STATES = ("open", "closing", "closed")

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.periods (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    name text NOT NULL,
    starts date NOT NULL,
    ends date NOT NULL,
    state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'closing', 'closed')),
    final boolean NOT NULL DEFAULT false,
    closed_at timestamptz,
    closed_by text,
    reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (starts <= ends),
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS periods_name ON dap.periods (tenant_id, name);
CREATE INDEX IF NOT EXISTS periods_span ON dap.periods (tenant_id, starts, ends);
-- a write's period: the workspace's periods held shared (a period being created waits for the
-- writes already checked, and those after it see it), then the period found, held by a
-- transaction-scoped SHARED advisory lock on its id (the lock manager's memory: writers do not
-- queue on the period's tuple as FOR SHARE would make them), then read again under the lock, so a
-- close that took the exclusive lock first is seen
CREATE OR REPLACE FUNCTION dap.period_of(t uuid, d date)
RETURNS TABLE (id uuid, name text, state text, starts date, ends date) LANGUAGE plpgsql AS $f$
DECLARE found_id uuid;
BEGIN
    IF d IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('dap.periods:' || t::text, 0));
    SELECT p.id INTO found_id FROM dap.periods p WHERE p.tenant_id = t AND p.starts <= d AND p.ends >= d;
    IF found_id IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('dap.period:' || found_id::text, 0));
    RETURN QUERY SELECT p.id, p.name, p.state, p.starts, p.ends FROM dap.periods p
        WHERE p.tenant_id = t AND p.id = found_id;
END
$f$;
-- the check folded into a create's INSERT (see ``fold``): the value ``v`` unchanged, or the
-- refusal DP001 with the period in DETAIL
CREATE OR REPLACE FUNCTION dap.period_open(t uuid, v anyelement, d date, may_post_closing boolean)
RETURNS anyelement LANGUAGE plpgsql AS $f$
DECLARE p record;
BEGIN
    SELECT * INTO p FROM dap.period_of(t, d);
    IF FOUND AND (p.state = 'closed' OR (p.state = 'closing' AND NOT may_post_closing)) THEN
        RAISE EXCEPTION USING ERRCODE = 'DP001', MESSAGE = 'dap: accounting period closed',
            DETAIL = json_build_object('id', p.id, 'name', p.name, 'state', p.state,
                                       'starts', p.starts, 'ends', p.ends)::text;
    END IF;
    RETURN v;
END
$f$;
"""
REFUSED_STATE = "DP001"  # the SQLSTATE of dap.period_open's refusal

# the writer's one statement: the period of a date, held (shared) to the writer's commit
LOCK = "SELECT id, name, state, starts, ends FROM dap.period_of($1, $2)"
# what a move of a period takes first: it waits for the writes holding the period, and the writes
# that come after wait for the move's commit (``workflows.periods``)
EXCLUSIVE = "SELECT pg_advisory_xact_lock(hashtextextended('dap.period:' || $1::uuid::text, 0))"
# what a period's creation takes: it waits for the writes of the workspace already checked (which
# found no period), and the writes that come after wait for it and find the new period
CREATING = "SELECT pg_advisory_xact_lock(hashtextextended('dap.periods:' || $1::uuid::text, 0))"


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


@dataclass(frozen=True)
class Period:
    id: uuid.UUID
    name: str
    state: str
    starts: dt.date
    ends: dt.date


def field_of(spec: EntitySpec) -> str | None:
    """The transaction date a period judges, for a transaction entity that has one; else ``None``."""
    if spec.characteristic is not Characteristic.TRANSACTION:
        return None
    f = spec.transaction_date_field()
    return f.name if f is not None else None


def judge(period: Period | None, *, may_post_closing: bool) -> str | None:
    """Why a write dated in ``period`` is refused (its message), or ``None``. Pure."""
    if period is None or period.state == "open":
        return None
    span = f"{period.starts.isoformat()} to {period.ends.isoformat()}"
    if period.state == "closing":
        if may_post_closing:
            return None
        return (
            f"period {period.name!r} ({span}) is closing: only holders of {POST_CLOSING} may post in it; "
            "date the record in an open period or ask a closer"
        )
    return (
        f"period {period.name!r} ({span}) is closed: date the record in an open period, or ask a holder "
        f"of {CLOSE} to reopen {period.name!r}"
    )


async def guard(
    conn: db.Connection, tenant: uuid.UUID, field: str, value: Any, *, may_post_closing: bool
) -> None:
    """422 ``SVC.PERIOD.CLOSED`` when the date ``value`` falls in a period closed to this caller;
    in the write's transaction, the period held (shared) until it commits."""
    day = txdates.day_of(value)
    if day is None:
        return
    row = await conn.fetchrow(LOCK, tenant, day)
    refusal = judge(_period(row), may_post_closing=may_post_closing)
    if refusal is not None:
        raise errors.ValidationFailed(refusal, code=CLOSED, errors=[errors.FieldProblem(field, refusal)])


async def guard_record(
    conn: db.Connection,
    tenant: uuid.UUID,
    spec: EntitySpec,
    column: str | None,
    current: asyncpg.Record | Mapping[str, Any],
    *,
    may_post_closing: bool,
) -> None:
    """:func:`guard` on the stored transaction date of ``current`` (submit, cancel, delete, update)."""
    name = field_of(spec)
    if name is None or column is None:
        return
    await guard(conn, tenant, name, current[column], may_post_closing=may_post_closing)


def fold(statement: str, place: int, sql_type: str, *, may_post_closing: bool) -> str:
    """``statement`` (an ``INSERT … VALUES`` whose tenant is ``$1``) with its parameter ``$place``
    -- the transaction date, a column of ``sql_type`` -- passed through ``dap.period_open``: the
    period check and its shared lock inside the write's own statement, so that a create that goes
    as one statement committed by itself (``storage.deferred``) stays one. Pure."""
    param = f"${place}::{sql_type}"
    day = f"({param} AT TIME ZONE 'UTC')::date" if sql_type.startswith("timestamp") else f"{param}::date"
    wrapped = f"dap.period_open($1, {param}, {day}, {'true' if may_post_closing else 'false'})"
    head, values, tail = statement.partition(" VALUES (")
    assert values, "an INSERT … VALUES statement"
    inner, close, rest = tail.partition(")")
    cells = [wrapped if cell.strip() == f"${place}" else cell for cell in inner.split(", ")]
    return f"{head}{values}{', '.join(cells)}{close}{rest}"


def refusal(exc: BaseException, field: str) -> Any:
    """The 422 ``SVC.PERIOD.CLOSED`` of a folded check's refusal (``exc`` from Postgres), else ``None``."""
    if getattr(exc, "sqlstate", None) != REFUSED_STATE:
        return None
    found = json.loads(getattr(exc, "detail", None) or "{}")
    period = Period(
        uuid.UUID(found["id"]),
        found["name"],
        found["state"],
        fieldvalues.date_of(found["starts"]),
        fieldvalues.date_of(found["ends"]),
    )
    message = judge(period, may_post_closing=False) or "the period is closed"
    return errors.ValidationFailed(message, code=CLOSED, errors=[errors.FieldProblem(field, message)])


def _period(row: asyncpg.Record | Mapping[str, Any] | None) -> Period | None:
    if row is None:
        return None
    return Period(row["id"], row["name"], row["state"], row["starts"], row["ends"])
