"""Approval gates: ``dap.approvals`` (one row per requested gated transition) and its votes.

Requesting a transition that declares ``approval`` (:func:`request`, inside the action's
transaction, on the record's locked row) opens an approval instead of moving: its first step
whose ``when`` holds starts (skipped steps recorded); when every step is skipped the transition
runs at once. A vote (:func:`decide`, ``approvals_flow``) locks the record, then the approval row
(always in that order, like every writer of the record), so the votes on one approval are
serialised across every process and exactly one vote reaches a step's quorum. A step that reaches
its quorum starts the next; the last one runs the transition in the deciding vote's transaction.

Tables (schema ``dap``, created by ``approvals_schema``):

``approvals`` — ``tenant_id``, ``id``, ``entity``, ``record_id``, ``action``, ``transition``,
``to_state``, ``reject_to``, ``status`` (``pending``, ``approved``, ``rejected``, ``cancelled``),
``step`` (index), ``step_name``, ``step_title``, ``approvers`` (quorum), ``votes`` (approvals of
the step counted so far), ``roles`` (who may cast the next vote, empty: anyone), ``permission``,
``self_approval``, ``basis`` (what votes are tied to: see ``gates.basis``), ``escalate_at`` (the
durable due time of the step's escalation), ``escalated_at``, ``escalate_to``,
``escalate_notify``, ``requester_sub``,
``requester_username``, ``history`` (jsonb list of what happened), ``created_at``,
``updated_at``, ``decided_at``. At most one pending approval per record (unique partial index).

``approval_votes`` — one row per vote: ``approval_id``, ``step``, ``principal_sub``,
``username``, ``decision``, ``comment``, ``record_version``, ``basis``, ``at``, ``voided_at``.
The unique partial index ``approval_votes_one`` allows one live vote per (approval, step,
principal); a vote voided by an edit of a display field no longer counts, and its voter may vote
again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server import errors
from dap.server.access import auth
from dap.server.catalog import Resource, machines
from dap.server.documents import auditing, filling
from dap.server.storage import db, tables
from dap.server.workflows import gates

PENDING = "SVC.APPROVAL.PENDING"
NOT_FOUND = "SVC.APPROVAL.NOT_FOUND"
CLOSED = "SVC.APPROVAL.CLOSED"
NOT_ELIGIBLE = "SVC.APPROVAL.NOT_ELIGIBLE"
SELF = "SVC.APPROVAL.SELF_APPROVAL"
ALREADY_VOTED = "SVC.APPROVAL.ALREADY_VOTED"
STALE = "SVC.APPROVAL.STALE"
COMMENT_REQUIRED = "SVC.APPROVAL.COMMENT_REQUIRED"

COLUMNS = (
    "id, entity, record_id, action, transition, to_state, reject_to, status, step, step_name, "
    "step_title, approvers, votes, roles, permission, self_approval, basis, escalate_at, "
    "escalated_at, escalate_to, requester_sub, requester_username, history, created_at, "
    "updated_at, decided_at"
)


def values_of(resource: Resource, row: Mapping[str, Any] | asyncpg.Record) -> dict[str, Any]:
    """A full row of the record as field → value (system columns included), for ``when`` and bases."""
    out: dict[str, Any] = {}
    for column in resource.table.columns:
        if column.name != "tenant_id":
            out[column.field or column.name] = row[column.name]
    if "docstatus" in out:
        out["docstatus"] = tables.DOCSTATUS[out["docstatus"]]
    return out


def event(kind: str, step: str | None = None, **more: Any) -> dict[str, Any]:
    """One entry of ``history``."""
    found: dict[str, Any] = {"event": kind, "at": dt.datetime.now(dt.UTC).isoformat()}
    if step is not None:
        found["step"] = step
    found.update({k: v for k, v in more.items() if v is not None})
    return found


async def audit(
    conn: db.Connection, write: auditing.Write, record_id: uuid.UUID, what: str, detail: Mapping[str, Any]
) -> None:
    """One audit row ``approval.<what>`` on the record (``changes`` holds ``{"approval": detail}``)."""
    await conn.execute(
        auditing.INSERT,
        write.tenant,
        write.resource.key,
        record_id,
        f"approval.{what}",
        write.sub,
        write.username,
        None,
        {"approval": dict(detail)},
        write.request_id,
    )


@dataclass(frozen=True)
class Start:
    """The columns a starting step sets."""

    index: int
    step: machines.Step
    basis: str

    def params(self) -> list[Any]:
        s = self.step
        return [
            self.index,
            s.name,
            s.title,
            s.approvers,
            list(gates.roles_now(s, 0)),
            s.permission,
            self.basis,
            s.escalate_after,
            list(s.escalate_to),
            s.notify,
        ]


# $n .. $n+9 of Start.params(): the step's columns, escalate_at from the delay in seconds
STEP_SET = (
    "step = ${0}, step_name = ${1}, step_title = ${2}, approvers = ${3}, votes = 0, roles = ${4}, "
    "permission = ${5}, basis = ${6}, escalated_at = NULL, "
    "escalate_at = CASE WHEN ${7}::float8 IS NULL THEN NULL "
    "ELSE now() + make_interval(secs => ${7}::float8) END, escalate_to = ${8}, escalate_notify = ${9}"
)


def step_set(first: int) -> str:
    return STEP_SET.format(*range(first, first + 10))


def starting(
    gate: machines.Gate, start: int, values: Mapping[str, Any], principal: auth.Principal
) -> tuple[Start | None, tuple[str, ...]]:
    """The step that starts at or after ``start`` on the record ``values``, and the skipped ones."""
    # as expressions see a record (documents.deriving): uuids as strings, ``session`` beside
    ctx: dict[str, Any] = {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in values.items()}
    ctx["session"] = filling.session_of(principal)
    found = gates.next_step(gate.steps, start, ctx, dt.datetime.now(dt.UTC))
    if found.index is None:
        return None, found.skipped
    step = gate.steps[found.index]
    return Start(found.index, step, gates.basis(step, values)), found.skipped


async def request(
    conn: db.Connection,
    write: auditing.Write,
    principal: auth.Principal,
    plan: machines.ActionPlan,
    current: asyncpg.Record,
) -> asyncpg.Record | None:
    """Open the approval of ``plan``'s gated transition on the locked record ``current``.

    The approval's row, or ``None`` when every step was skipped (the caller moves at once). 409
    ``SVC.APPROVAL.PENDING`` while another approval of the record is open.
    """
    assert plan.move is not None
    assert plan.move.gate is not None
    move, gate, resource = plan.move, plan.move.gate, write.resource
    open_id = await conn.fetchval(
        "SELECT id FROM dap.approvals WHERE tenant_id = $1 AND entity = $2 AND record_id = $3 "
        "AND status = 'pending'",
        write.tenant,
        resource.key,
        current["id"],
    )
    if open_id is not None:
        raise errors.Conflict(
            f"this {resource.key} record already waits for approval {open_id}; "
            f"approve or reject it (POST …/api/_approvals/{open_id}/approve) before requesting again",
            code=PENDING,
        )
    values = values_of(resource, current)
    start, skipped = starting(gate, 0, values, principal)
    for name in skipped:
        await audit(conn, write, current["id"], "skipped", {"transition": move.name, "step": name})
    if start is None:
        return None
    history = [event("requested", by=write.username), *(event("skipped", s) for s in skipped)]
    history.append(event("started", start.step.name))
    row = await conn.fetchrow(
        "INSERT INTO dap.approvals (tenant_id, entity, record_id, action, transition, to_state, "
        "reject_to, self_approval, requester_sub, requester_username, history, step, step_name, "
        "step_title, approvers, roles, permission, basis, escalate_at, escalate_to, escalate_notify) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, "
        "CASE WHEN $19::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => $19::float8) END, "
        f"$20, $21) RETURNING {COLUMNS}",
        write.tenant,
        resource.key,
        current["id"],
        plan.name,
        move.name,
        move.to,
        gate.reject_to,
        gate.self_approval,
        write.sub,
        write.username,
        history,
        *start.params(),
    )
    assert row is not None
    await audit(
        conn,
        write,
        current["id"],
        "requested",
        {"id": str(row["id"]), "transition": move.name, "step": start.step.name},
    )
    return row


def view(row: Mapping[str, Any] | asyncpg.Record, *, history: bool = True) -> dict[str, Any]:
    """An approval as the API shows it (``history`` left out of inbox items)."""
    pending = row["status"] == "pending"
    return {
        "id": str(row["id"]),
        "entity": row["entity"],
        "record_id": str(row["record_id"]),
        "action": row["action"],
        "transition": row["transition"],
        "to": row["to_state"],
        "status": row["status"],
        "step": {
            "index": row["step"],
            "name": row["step_name"],
            "title": row["step_title"],
            "approvers": row["approvers"],
            "votes": row["votes"],
            "roles": list(row["roles"]),
            "permission": row["permission"],
            "escalate_at": row["escalate_at"].isoformat() if pending and row["escalate_at"] else None,
            "escalated": row["escalated_at"] is not None,
        }
        if pending
        else None,
        "requested_by": row["requester_username"],
        "created_at": row["created_at"].isoformat(),
        "decided_at": row["decided_at"].isoformat() if row["decided_at"] else None,
        **({"history": row["history"]} if history else {}),
    }
