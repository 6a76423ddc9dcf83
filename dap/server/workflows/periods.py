"""Managing a workspace's accounting periods: create, start closing, close, reopen, and their trail.

The rule every write obeys is ``dap.server.access.periods`` (one rule below the protocols); this
module moves a period between its states, protocol-neutral (REST serves it: ``web.periods``):

- ``open`` → ``closing`` (:func:`start_closing`): only holders of ``dap.periods.post_closing``
  may still post in it;
- ``open``/``closing`` → ``closed`` (:func:`close`, with a reason; ``final: true`` makes it
  final): no write dated in it, by anyone; the closing balance of every summary entity as of its
  last day is written (``dap.period_balances``, :func:`balances`);
- ``closing``/``closed`` → ``open`` (:func:`reopen`, with a reason): refused with 409
  ``SVC.PERIOD.REOPEN_DENIED`` for a final period and while a later period is closed (reopen
  the later one first, newest first, as the books were closed).

Each change first takes the period's exclusive lock (``periods.EXCLUSIVE``) -- which waits for
the writes holding it shared and makes the writes that come after wait and then see the new
state -- and writes an audit row
(``dap.audit_log``, entity ``_periods``) with who and why, in the same transaction. Every move
needs ``dap.periods.close`` (admin holds it): 403 ``SVC.AUTH.FORBIDDEN`` without.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server import errors, fieldvalues
from dap.server.access import auth, periods
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, summaries
from dap.server.storage import db

ENTITY = "_periods"  # the audit rows' entity: no module starts with "_"
NOT_FOUND = "SVC.PERIOD.NOT_FOUND"
COLUMNS = "id, name, starts, ends, state, final, closed_at, closed_by, reason, created_at, updated_at"
_REASON_MAX = 2000


@dataclass(frozen=True)
class Actor:
    principal: auth.Principal
    request_id: str | None = None


def view(row: asyncpg.Record | Mapping[str, Any]) -> dict[str, Any]:
    """A period as the API shows it."""
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "starts": row["starts"].isoformat(),
        "ends": row["ends"].isoformat(),
        "state": row["state"],
        "final": row["final"],
        "closed_at": row["closed_at"].isoformat() if row["closed_at"] is not None else None,
        "closed_by": row["closed_by"],
        "reason": row["reason"],
    }


def allowed(catalog: Catalog, principal: auth.Principal) -> None:
    """403 unless ``principal`` holds ``dap.periods.close``."""
    if not catalog.grants.allows(principal.roles, periods.CLOSE):
        raise errors.Forbidden(
            f"managing accounting periods needs the permission {periods.CLOSE}", code="SVC.AUTH.FORBIDDEN"
        )


def reason_of(body: Mapping[str, Any], *, required: bool) -> str | None:
    """The ``reason`` of a move: a non-empty string (422 otherwise, when required)."""
    reason = body.get("reason")
    if reason is None and not required:
        return None
    if not isinstance(reason, str) or not reason.strip() or len(reason) > _REASON_MAX:
        raise errors.ValidationFailed(
            "reason is required: say why, in 1 to 2000 characters (it goes to the audit trail)",
            errors=[errors.FieldProblem("reason", "a non-empty string of at most 2000 characters")],
        )
    return reason.strip()


def _day(body: Mapping[str, Any], key: str) -> dt.date:
    value = body.get(key)
    try:
        return fieldvalues.date_of(value) if isinstance(value, str) else _bad(key)
    except ValueError:
        return _bad(key)


def _bad(key: str) -> dt.date:
    raise errors.ValidationFailed(
        f"{key} must be a date (YYYY-MM-DD)", errors=[errors.FieldProblem(key, "a date YYYY-MM-DD")]
    )


async def listed(conn: db.Connection, tenant: uuid.UUID) -> list[dict[str, Any]]:
    rows = await conn.fetch(f"SELECT {COLUMNS} FROM dap.periods WHERE tenant_id = $1 ORDER BY starts", tenant)
    return [view(r) for r in rows]


async def create(
    conn: db.Connection, tenant: uuid.UUID, actor: Actor, body: Mapping[str, Any]
) -> dict[str, Any]:
    """A new open period ``{name, starts, ends, final?}``; 422 when it overlaps another or its
    dates are wrong, 409 ``SVC.VALIDATE.DUPLICATE`` for a name taken."""
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise errors.ValidationFailed(
            "name is required (1 to 100 characters, e.g. 2026-11)",
            errors=[errors.FieldProblem("name", "a non-empty string of at most 100 characters")],
        )
    starts, ends = _day(body, "starts"), _day(body, "ends")
    if ends < starts:
        raise errors.ValidationFailed(
            "ends is before starts", errors=[errors.FieldProblem("ends", "on or after starts")]
        )
    final = body.get("final", False)
    if not isinstance(final, bool):
        raise errors.ValidationFailed(
            "final must be true or false", errors=[errors.FieldProblem("final", "boolean")]
        )
    unknown = sorted(set(body) - {"name", "starts", "ends", "final"})
    if unknown:
        raise errors.ValidationFailed(
            f"unknown field(s): {', '.join(unknown)}",
            errors=[errors.FieldProblem(k, "unknown field (name, starts, ends, final)") for k in unknown],
        )
    async with db.committed(conn):
        # one creator at a time per workspace, so two overlapping periods cannot both pass the check;
        # the same lock waits for the writes already checked (they found no period: access.periods)
        await conn.execute(periods.CREATING, tenant)
        clash = await conn.fetchrow(
            "SELECT name FROM dap.periods WHERE tenant_id = $1 AND starts <= $3 AND ends >= $2",
            tenant,
            starts,
            ends,
        )
        if clash is not None:
            raise errors.ValidationFailed(
                f"{starts} to {ends} overlaps period {clash['name']!r}; a date belongs to one period",
                errors=[errors.FieldProblem("starts", f"overlaps {clash['name']!r}")],
            )
        try:
            row = await conn.fetchrow(
                f"INSERT INTO dap.periods (tenant_id, name, starts, ends, final) VALUES ($1, $2, $3, $4, $5) "
                f"RETURNING {COLUMNS}",
                tenant,
                name.strip(),
                starts,
                ends,
                final,
            )
        except asyncpg.UniqueViolationError as exc:
            raise errors.Conflict(
                f"a period named {name!r} exists already",
                code="SVC.VALIDATE.DUPLICATE",
                errors=[errors.FieldProblem("name", "must be unique within the workspace")],
            ) from exc
        assert row is not None
        await _trail(conn, tenant, actor, row, "create", {"state": [None, "open"]})
    return view(row)


async def _locked(conn: db.Connection, tenant: uuid.UUID, period_id: uuid.UUID) -> asyncpg.Record:
    """The period row, locked: the exclusive lock the writes of its dates hold shared (waiting for
    them), then the row ``FOR UPDATE`` (one move of a period at a time)."""
    await conn.execute(periods.EXCLUSIVE, period_id)
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.periods WHERE tenant_id = $1 AND id = $2 FOR UPDATE", tenant, period_id
    )
    if row is None:
        raise errors.NotFound(f"no period {period_id} in this workspace", code=NOT_FOUND)
    return row


async def _moved(
    conn: db.Connection,
    tenant: uuid.UUID,
    actor: Actor,
    current: asyncpg.Record,
    state: str,
    reason: str | None,
    *,
    action: str,
    final: bool | None = None,
) -> dict[str, Any]:
    closing = state == "closed"
    row = await conn.fetchrow(
        "UPDATE dap.periods SET state = $3, reason = $4, final = final OR $5, updated_at = now(), "
        "closed_at = CASE WHEN $6 THEN now() ELSE NULL END, closed_by = CASE WHEN $6 THEN $7 ELSE NULL END "
        f"WHERE tenant_id = $1 AND id = $2 RETURNING {COLUMNS}",
        tenant,
        current["id"],
        state,
        reason,
        bool(final),
        closing,
        actor.principal.username,
    )
    assert row is not None
    changes: dict[str, list[Any]] = {
        "state": [current["state"], state],
        "reason": [current["reason"], reason],
    }
    if row["final"] != current["final"]:
        changes["final"] = [current["final"], row["final"]]
    await _trail(conn, tenant, actor, row, action, changes)
    return view(row)


async def start_closing(
    conn: db.Connection, tenant: uuid.UUID, actor: Actor, period_id: uuid.UUID, reason: str | None
) -> dict[str, Any]:
    async with db.committed(conn):
        current = await _locked(conn, tenant, period_id)
        if current["state"] != "open":
            raise errors.Conflict(
                f"period {current['name']!r} is {current['state']}; only an open period starts closing",
                code="SVC.PERIOD.STATE",
            )
        return await _moved(conn, tenant, actor, current, "closing", reason, action="start_closing")


async def close(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    actor: Actor,
    period_id: uuid.UUID,
    reason: str,
    *,
    final: bool,
) -> dict[str, Any]:
    """Close the period: the exclusive lock waits for every write holding it, then no write dated
    in it commits (they wait for this transaction and read it closed). The closing balances of
    every summary, as of the period's last day, are written in the same transaction."""
    async with db.committed(conn):
        current = await _locked(conn, tenant, period_id)
        if current["state"] == "closed":
            raise errors.Conflict(f"period {current['name']!r} is closed already", code="SVC.PERIOD.STATE")
        await summaries.close_balances(
            conn, catalog, tenant, period_id, current["ends"], date_of=_date_column
        )
        return await _moved(conn, tenant, actor, current, "closed", reason, action="close", final=final)


def _date_column(resource: Resource) -> str | None:
    name = periods.field_of(resource.spec)
    return resource.column(name) if name is not None else None


async def balances(conn: db.Connection, tenant: uuid.UUID, period_id: uuid.UUID) -> list[dict[str, Any]]:
    """The closing balances written when the period closed (none while it is open)."""
    rows = await conn.fetch(
        "SELECT entity, grp, sums FROM dap.period_balances WHERE tenant_id = $1 AND period_id = $2 "
        "ORDER BY entity, grp::text",
        tenant,
        period_id,
    )
    return [{"entity": r["entity"], "group": r["grp"], "sums": r["sums"]} for r in rows]


async def reopen(
    conn: db.Connection, tenant: uuid.UUID, actor: Actor, period_id: uuid.UUID, reason: str
) -> dict[str, Any]:
    async with db.committed(conn):
        current = await _locked(conn, tenant, period_id)
        refusal = await _reopen_refusal(conn, tenant, current)
        if refusal is not None:
            raise errors.Conflict(refusal, code=periods.REOPEN_DENIED)
        await conn.execute(  # written again at the next close
            "DELETE FROM dap.period_balances WHERE tenant_id = $1 AND period_id = $2", tenant, period_id
        )
        return await _moved(conn, tenant, actor, current, "open", reason, action="reopen")


async def _reopen_refusal(conn: db.Connection, tenant: uuid.UUID, current: asyncpg.Record) -> str | None:
    name = current["name"]
    if current["state"] == "open":
        return f"period {name!r} is open; there is nothing to reopen"
    if current["final"]:
        return (
            f"period {name!r} was closed as final and can never be reopened; "
            "post a correction in an open period"
        )
    later = await conn.fetchrow(
        "SELECT name FROM dap.periods WHERE tenant_id = $1 AND starts > $2 AND state = 'closed' "
        "ORDER BY starts DESC LIMIT 1",
        tenant,
        current["ends"],
    )
    if later is not None:
        return (
            f"period {later['name']!r}, after {name!r}, is closed: reopen the later periods first "
            "(newest first), or post a correction in an open period"
        )
    return None


async def _trail(
    conn: db.Connection,
    tenant: uuid.UUID,
    actor: Actor,
    row: asyncpg.Record,
    action: str,
    changes: Mapping[str, list[Any]],
) -> None:
    await conn.execute(
        auditing.INSERT,
        tenant,
        ENTITY,
        row["id"],
        action,
        actor.principal.sub,
        actor.principal.username,
        None,
        dict(changes),
        actor.request_id,
    )


async def trail(conn: db.Connection, tenant: uuid.UUID, period_id: uuid.UUID) -> list[dict[str, Any]]:
    """The period's audit rows, newest first: who moved it, when, and why."""
    rows = await conn.fetch(auditing.SELECT, tenant, ENTITY, period_id, 100, 0)
    return [
        {
            "id": str(r["public_id"]),
            "action": r["action"],
            "at": r["at"].isoformat(),
            "actor": {"sub": r["actor_sub"], "username": r["actor_username"]},
            "changes": r["changes"],
        }
        for r in rows
    ]


async def record(
    conn: db.Connection,
    tenant: uuid.UUID,
    actor: Actor,
    row: asyncpg.Record,
    action: str,
    changes: Mapping[str, list[Any]],
) -> None:
    """The audit row of a period's change by ``actor`` (the declared calendar's creations too)."""
    await _trail(conn, tenant, actor, row, action, changes)
