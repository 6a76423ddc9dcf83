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

The check and the close are serialised by a row lock (:data:`LOCK`): every checked write reads its
period ``FOR SHARE`` in its own transaction -- one indexed statement, the only cost a writer pays
-- and holds the lock to its commit; the close updates the period row, which waits for the
writers holding it and makes every writer that comes after wait for the close and then read the
period as closed. So no write dated in a period commits after the period's close
(``tests/server/test_periods_race.py``). A date no period covers is open and locks nothing.

The pure decision is :func:`judge`; :func:`guard` is its thin shell over Postgres. Managing the
periods (create, close, reopen, their audit rows) is ``dap.server.workflows.periods``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.config.entities import EntitySpec
from dap.config.enums import Characteristic
from dap.server import errors
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
"""

# the writer's one statement: the period of a date, locked FOR SHARE to the writer's commit
LOCK = (
    "SELECT id, name, state, starts, ends FROM dap.periods "
    "WHERE tenant_id = $1 AND starts <= $2 AND ends >= $2 FOR SHARE"
)


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
    in the write's transaction, the period row locked ``FOR SHARE`` until it commits."""
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


def _period(row: asyncpg.Record | Mapping[str, Any] | None) -> Period | None:
    if row is None:
        return None
    return Period(row["id"], row["name"], row["state"], row["starts"], row["ends"])
