"""A vote on an approval: approve or reject, in one transaction (see ``approvals``).

Order of a vote: the approval read (404); the record locked ``FOR UPDATE``, then the approval row
(409 when it is no longer pending); the voter's eligibility for the current step (403: requester,
role, permission, escalation); the vote's basis compared with the approval's (an edited display
field voids the step's open votes, recorded); the record still in a state the transition runs from
(else the approval is cancelled, 409); one live vote per (approval, step, principal) by the unique
index (409 ``ALREADY_VOTED``); then the count: a step at its quorum starts the next (``when``
evaluated, skips recorded) or, after the last, the transition runs (state, version, the action's
native handler, audit, ``emits``). A reject ends the approval, moving the record to
``on_reject.to`` when declared. Every vote, void, skip and outcome is an audit row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server import errors, fieldvalues
from dap.server.access import auth
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import auditing, reading
from dap.server.events import outbox
from dap.server.storage import caching, db, tables
from dap.server.workflows import approvals, gates, handlers
from dap.server.workflows import machines as states

A = approvals


@dataclass(frozen=True)
class Vote:
    catalog: Catalog
    tenant: uuid.UUID
    approval_id: uuid.UUID
    principal: auth.Principal
    approve: bool
    comment: str | None
    request_id: str | None


@dataclass(frozen=True)
class Decided:
    approval: dict[str, Any]
    resource: Resource | None
    record: dict[str, Any] | None  # the record after the vote, when it moved
    cancelled: str | None = None  # why the approval was cancelled instead of counting the vote


async def _row(conn: db.Connection, tenant: uuid.UUID, approval_id: uuid.UUID, lock: bool) -> asyncpg.Record:
    found = await conn.fetchrow(
        f"SELECT {A.COLUMNS} FROM dap.approvals WHERE tenant_id = $1 AND id = $2"
        + (" FOR UPDATE" if lock else ""),
        tenant,
        approval_id,
    )
    if found is None:
        raise errors.NotFound(f"no approval {approval_id} in this workspace", code=A.NOT_FOUND)
    return found


async def _close(
    conn: db.Connection, tenant: uuid.UUID, row: asyncpg.Record, status: str, entry: dict[str, Any]
) -> asyncpg.Record:
    found = await conn.fetchrow(
        "UPDATE dap.approvals SET status = $3, decided_at = now(), updated_at = now(), "
        f"history = history || $4::jsonb WHERE tenant_id = $1 AND id = $2 RETURNING {A.COLUMNS}",
        tenant,
        row["id"],
        status,
        [entry],
    )
    assert found is not None
    return found


async def _move(
    conn: db.Connection, write: auditing.Write, record: asyncpg.Record, to: str
) -> asyncpg.Record:
    resource = write.resource
    column = resource.column(machines.STATE)
    assert column is not None
    found = await conn.fetchrow(
        f"UPDATE {tables.quote(resource.table.name)} SET {tables.quote(column)} = $3, "
        "version = version + 1, updated_at = now() WHERE tenant_id = $1 AND id = $2 "
        f"RETURNING {resource.table.select_columns}",
        write.tenant,
        record["id"],
        to,
    )
    assert found is not None
    await caching.announce(conn, resource, write.tenant, record["id"])
    return found


async def _complete(
    conn: db.Connection, write: auditing.Write, plan: machines.ActionPlan, record: asyncpg.Record, row: Any
) -> asyncpg.Record:
    """Run the approved transition: the native handler (if any), the move, audit, ``emits``."""
    assert plan.move is not None
    resource, column = write.resource, write.resource.column(machines.STATE)
    assert column is not None
    before = states.current(plan.move, record[column])
    impl = plan.declared.impl if plan.declared is not None else None
    if impl is not None and impl.type == "native":
        handler = handlers.lookup(handlers.name_of(resource.key, plan.name, impl.handler))
        await handler(
            handlers.Context(
                conn=conn,
                tenant=write.tenant,
                entity=resource.key,
                action=plan.name,
                record=reading.present(resource, record),
                params={},
                principal_sub=write.sub,
                principal_username=write.username,
            )
        )
    moved = await _move(conn, write, record, plan.move.to)
    if plan.declared is not None and plan.declared.audit:
        changes = {machines.STATE: [before, plan.move.to]}
        await auditing.record(
            conn, write, record_id=record["id"], action=plan.name, version=moved["version"], changes=changes
        )
    if plan.declared is not None and plan.declared.emits:
        kids = await reading.load_children(conn, resource, write.tenant, [record["id"]], write.catalog)
        payload = {
            "record": reading.present(resource, moved, kids.get(record["id"]) if resource.children else None),
            "params": {},
            "from": before,
            "to": plan.move.to,
            "approval": str(row["id"]),
        }
        await outbox.emit(
            conn,
            tenant=write.tenant,
            entity=resource.key,
            record_id=record["id"],
            action=plan.name,
            event=plan.declared.emits,
            payload=payload,
            actor_sub=write.sub,
            actor_username=write.username,
            request_id=write.request_id,
        )
    return moved


def _plan(catalog: Catalog, row: asyncpg.Record) -> tuple[Resource, machines.ActionPlan, machines.Gate]:
    resource = catalog.resources.get(row["entity"])
    plan = resource.workflow.get(row["action"]) if resource is not None else None
    if resource is None or plan is None or plan.move is None or plan.move.gate is None:
        raise errors.Conflict(
            f"approval {row['id']} gates {row['entity']} {row['action']}, which this application "
            "no longer declares with an approval gate; it can only stay as it is",
            code=A.CLOSED,
        )
    return resource, plan, plan.move.gate


async def _void(
    conn: db.Connection, write: auditing.Write, row: asyncpg.Record, step: machines.Step, basis: str
) -> int:
    """The displayed fields changed since the step's votes: void them (audited); the votes left (0)."""
    voided = await conn.execute(
        "UPDATE dap.approval_votes SET voided_at = now() WHERE tenant_id = $1 AND approval_id = $2 "
        "AND step = $3 AND voided_at IS NULL",
        write.tenant,
        row["id"],
        row["step"],
    )
    count = int(voided.split()[-1])
    await conn.execute(
        "UPDATE dap.approvals SET basis = $3, votes = 0, roles = $4, history = history || $5::jsonb "
        "WHERE tenant_id = $1 AND id = $2",
        write.tenant,
        row["id"],
        basis,
        list(gates.roles_now(step, 0)),
        [A.event("voided", step.name, votes=count, reason="the record changed")],
    )
    await A.audit(
        conn, write, row["record_id"], "voided", {"id": str(row["id"]), "step": step.name, "votes": count}
    )
    return 0


async def decide(conn: db.Connection, vote: Vote) -> Decided:
    """Count one vote (see the module's docstring); what the approval and record became."""
    tenant, principal = vote.tenant, vote.principal
    async with db.committed(conn):
        first = await _row(conn, tenant, vote.approval_id, lock=False)
        resource, plan, gate = _plan(vote.catalog, first)
        assert plan.move is not None
        write = auditing.Write(
            vote.catalog, resource, tenant, principal.sub, principal.username, vote.request_id
        )
        record = await conn.fetchrow(
            f"SELECT {resource.table.select_columns} FROM {tables.quote(resource.table.name)} "
            "WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
            tenant,
            first["record_id"],
        )
        row = await _row(conn, tenant, vote.approval_id, lock=True)
        if row["status"] != "pending":
            raise errors.Conflict(f"approval {row['id']} is already {row['status']}", code=A.CLOSED)
        record_id = row["record_id"]
        if record is None:
            row = await _close(conn, tenant, row, "cancelled", A.event("cancelled", reason="record deleted"))
            return Decided(A.view(row), resource, None, "the record was deleted")
        column = resource.column(machines.STATE)
        assert column is not None
        if states.current(plan.move, record[column]) not in plan.move.origins:
            why = f"the record moved to {record[column]!r}, from which {plan.move.name} does not run"
            row = await _close(conn, tenant, row, "cancelled", A.event("cancelled", reason=why))
            await A.audit(conn, write, record_id, "cancelled", {"id": str(row["id"]), "reason": why})
            return Decided(A.view(row), resource, None, why)
        step = gate.steps[row["step"]]
        basis = gates.basis(step, A.values_of(resource, record))
        votes = row["votes"] if basis == row["basis"] else await _void(conn, write, row, step, basis)
        refused = gates.refusal(
            step,
            gates.Voter(principal.sub, principal.roles),
            votes=votes,
            escalated=row["escalated_at"] is not None,
            requester=row["requester_sub"],
            self_approval=row["self_approval"],
            allows=resource.grants.allows,
        )
        if refused is not None:  # rolls back a voiding above too: the next vote voids again
            code = A.SELF if principal.sub == row["requester_sub"] else A.NOT_ELIGIBLE
            raise errors.Forbidden(f"you cannot vote on approval {row['id']}: {refused}", code=code)
        inserted = await conn.fetchval(
            "INSERT INTO dap.approval_votes (tenant_id, approval_id, step, step_name, principal_sub, "
            "username, decision, comment, record_version, basis) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
            "$9, $10) ON CONFLICT (tenant_id, approval_id, step, principal_sub) WHERE voided_at IS NULL "
            "DO NOTHING RETURNING id",
            tenant,
            row["id"],
            row["step"],
            step.name,
            principal.sub,
            principal.username,
            "approve" if vote.approve else "reject",
            vote.comment,
            record["version"],
            basis,
        )
        if inserted is None:
            raise errors.Conflict(
                f"you already voted on step {step.name!r} of approval {row['id']}", code=A.ALREADY_VOTED
            )
        detail = {"id": str(row["id"]), "step": step.name, "comment": vote.comment}
        if not vote.approve:
            return await _reject(conn, write, row, record, gate, plan, detail)
        votes += 1
        await A.audit(
            conn, write, record_id, "approved-vote", {**detail, "votes": votes, "of": step.approvers}
        )
        entry = A.event("vote", step.name, by=principal.username, votes=votes, comment=vote.comment)
        if votes < step.approvers:
            counted = await conn.fetchrow(
                "UPDATE dap.approvals SET votes = $3, roles = $4, updated_at = now(), "
                f"history = history || $5::jsonb WHERE tenant_id = $1 AND id = $2 RETURNING {A.COLUMNS}",
                tenant,
                row["id"],
                votes,
                list(gates.roles_now(step, votes)),
                [entry],
            )
            assert counted is not None
            return Decided(A.view(counted), resource, None)
        return await _advance(conn, write, row, record, gate, plan, entry, principal)


async def _advance(
    conn: db.Connection,
    write: auditing.Write,
    row: asyncpg.Record,
    record: asyncpg.Record,
    gate: machines.Gate,
    plan: machines.ActionPlan,
    entry: dict[str, Any],
    principal: auth.Principal,
) -> Decided:
    """The step reached its quorum: start the next one, or run the transition after the last."""
    tenant, record_id = write.tenant, record["id"]
    done = gate.steps[row["step"]]
    await A.audit(conn, write, record_id, "step-approved", {"id": str(row["id"]), "step": done.name})
    start, skipped = A.starting(gate, row["step"] + 1, A.values_of(write.resource, record), principal)
    history = [entry, A.event("step-approved", done.name), *(A.event("skipped", s) for s in skipped)]
    for name in skipped:
        await A.audit(conn, write, record_id, "skipped", {"id": str(row["id"]), "step": name})
    if start is not None:
        history.append(A.event("started", start.step.name))
        found = await conn.fetchrow(
            f"UPDATE dap.approvals SET {A.step_set(3)}, updated_at = now(), history = history || $13::jsonb "
            f"WHERE tenant_id = $1 AND id = $2 RETURNING {A.COLUMNS}",
            tenant,
            row["id"],
            *start.params(),
            history,
        )
        assert found is not None
        return Decided(A.view(found), write.resource, None)
    moved = await _complete(conn, write, plan, record, row)
    history.append(A.event("approved", to=plan.move.to if plan.move else None))
    await conn.execute(
        "UPDATE dap.approvals SET history = history || $3::jsonb WHERE tenant_id = $1 AND id = $2",
        tenant,
        row["id"],
        history,
    )
    closed = await _close(conn, tenant, row, "approved", A.event("closed"))
    await A.audit(conn, write, record_id, "approved", {"id": str(row["id"]), "version": moved["version"]})
    return Decided(A.view(closed), write.resource, reading.present(write.resource, moved))


async def _reject(
    conn: db.Connection,
    write: auditing.Write,
    row: asyncpg.Record,
    record: asyncpg.Record,
    gate: machines.Gate,
    plan: machines.ActionPlan,
    detail: dict[str, Any],
) -> Decided:
    await A.audit(conn, write, record["id"], "rejected", {**detail, "to": gate.reject_to})
    entry = A.event(
        "rejected", detail["step"], by=write.username, comment=detail["comment"], to=gate.reject_to
    )
    closed = await _close(conn, write.tenant, row, "rejected", entry)
    shown = None
    if gate.reject_to is not None:
        moved = await _move(conn, write, record, gate.reject_to)
        shown = reading.present(write.resource, moved)
    return Decided(A.view(closed), write.resource, shown)


def comment_of(body: Any, *, required: bool) -> str | None:
    """The vote's ``comment``; 422 when a reject gives none or the body has other fields."""
    body = body or {}
    problems = [errors.FieldProblem(k, "unknown field; send only comment") for k in body if k != "comment"]
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        problems.append(errors.FieldProblem("comment", "must be a string"))
    elif required and not (comment or "").strip():
        problems.append(errors.FieldProblem("comment", "is required: say why you reject"))
    elif comment is not None:
        try:
            fieldvalues.check_text(comment)  # what Postgres text cannot store
        except fieldvalues.InvalidValueError as exc:
            problems.append(errors.FieldProblem("comment", str(exc)))
    if problems:
        missing = required and not (isinstance(comment, str) and comment.strip())
        raise errors.ValidationFailed(
            "the vote's body is invalid", code=A.COMMENT_REQUIRED if missing else None, errors=problems
        )
    return comment.strip() if isinstance(comment, str) and comment.strip() else None
