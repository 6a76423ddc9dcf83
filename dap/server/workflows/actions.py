"""One custom action or state-machine transition on one record, in one transaction.

The order of a call, each step refusing before anything is written:

1. :func:`runner` — what runs it, decided before any I/O: a ``native`` handler registered by
   entry point (501 ``SVC.ACTION.HANDLER_NOT_REGISTERED`` when missing), ``sidecar`` (the app
   process through the process's ``sidecars.Invoker``; 501 naming ``--sidecar-endpoint`` without
   one), ``script`` (501), or a plain transition (no ``impl``: it just moves the state). A
   declared action that is neither is 501 too. A transition gated by an approval is checked the
   same way (its handler runs when the approval completes).
2. :func:`parse_params` — the body is the action's params, validated like fields by
   ``fieldvalues.coerce_row``: 422 with one entry per problem.
3. :func:`limit` — ``rate_limit`` counted in ``dap.rate_counts`` (``access.throttling``), so every
   process of a deployment shares one budget: 429 with ``Retry-After``. Counted before the
   transaction on its own statement: a refused call never holds the record's lock.
4. :func:`run` — in one transaction: the ``Idempotency-Key`` claimed (``documents.idempotency``:
   same key and body replay the first answer, other body 422, twin still running 409); the row
   locked ``FOR UPDATE`` through ``guards.select_for_write`` (row scope 403/404, ``If-Match`` 412);
   a transaction record dated in a closed accounting period refused (422 ``SVC.PERIOD.CLOSED``);
   the transition checked against the current state (409 ``SVC.STATE.TRANSITION_NOT_ALLOWED``
   naming the states it runs from); the conditions on the record and ``params.*`` (422 with the
   declared messages); a gated transition opens its approval here (``approvals.request``) and
   answers 202 without moving, unless every step was skipped; the native handler; the state moved
   with ``version + 1``; the audit row when the action declares ``audit``; the ``emits`` event in
   ``dap.outbox``; the answer stored under the idempotency key. Two concurrent transitions of one
   record are serialised by the lock; the second sees the first's state and gets the 409.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.config import durations
from dap.server import errors, fieldvalues
from dap.server.access import auth, guards, throttling
from dap.server.catalog import machines as compiled
from dap.server.documents import auditing, filling, idempotency, reading
from dap.server.events import outbox
from dap.server.storage import caching, db, sql, tables
from dap.server.workflows import approvals, handlers, machines, sidecars

NOT_IMPLEMENTED = "SVC.ACTION.NOT_IMPLEMENTED"
SIDECAR = sidecars.NOT_CONFIGURED


Runner = handlers.Handler | sidecars.Bound


def runner(entity: str, plan: compiled.ActionPlan, invoker: sidecars.Invoker | None = None) -> Runner | None:
    """What runs ``plan``: a native handler or the app process (``None``: nothing but the
    transition); or a 501."""
    impl = plan.declared.impl if plan.declared is not None else None
    if impl is None:
        if plan.move is not None:
            return None
        raise errors.NotImplementedHere(
            f"action {plan.name!r} of {entity} declares no impl and is no state-machine transition, "
            "so there is nothing to run; declare impl (native or sidecar) or make it a transition's action",
            code=NOT_IMPLEMENTED,
        )
    if impl.type == "sidecar":
        if invoker is None:
            raise sidecars.not_configured(entity, plan.name)
        timeout = durations.parse(impl.timeout).total_seconds() if impl.timeout else None
        return sidecars.Bound(invoker, timeout)
    if impl.type == "saga":
        return None  # a tracked job the saga engine runs (``workflows.sagas``), never here
    if impl.type == "script":
        raise errors.NotImplementedHere(
            f"action {plan.name!r} of {entity} is a script action; scripts are not run yet",
            code=NOT_IMPLEMENTED,
        )
    return handlers.lookup(handlers.name_of(entity, plan.name, impl.handler))


def runs_here(entity: str, plan: compiled.ActionPlan, *, bridged: bool = False) -> bool:
    """Whether :func:`runner` finds something to run ``plan`` (no 501); ``bridged``: an app
    process is attached (``sidecars.INVOKER``), so ``impl.type: sidecar`` runs too. Pure."""
    impl = plan.declared.impl if plan.declared is not None else None
    if impl is not None and impl.type == "sidecar":
        return bridged
    try:
        runner(entity, plan)
    except errors.NotImplementedHere:
        return False
    return True


def parse_params(plan: compiled.ActionPlan, body: Mapping[str, Any]) -> dict[str, Any]:
    """The body as the action's params (column values); 422 with every problem."""
    try:
        return fieldvalues.coerce_row(plan.params, body, partial=False)
    except fieldvalues.InvalidRowError as exc:
        raise errors.ValidationFailed(
            f"{len(exc.problems)} param(s) of {plan.name} are invalid",
            code="SVC.ACTION.PARAMS_INVALID",
            errors=[errors.FieldProblem(p, m) for p, m in exc.problems],
        ) from exc


async def limit(
    conn: db.Connection, entity: str, plan: compiled.ActionPlan, *, tenant: uuid.UUID, sub: str, ip: str
) -> None:
    """Count one call against the action's ``rate_limit`` (shared by every process); 429 past it."""
    spec = plan.declared.rate_limit if plan.declared is not None else None
    await throttling.check_action(conn, entity, plan.name, spec, tenant=tenant, sub=sub, ip=ip)


@dataclass(frozen=True)
class Call:
    """One request of an action on one record."""

    write: auditing.Write
    principal: auth.Principal
    access: guards.Access
    plan: compiled.ActionPlan
    record_id: uuid.UUID
    params: dict[str, Any]  # validated
    expected: int | None  # If-Match
    idempotency: tuple[str, bytes] | None  # key, fingerprint
    report: handlers.Report | None = None  # a job's progress (``workflows.jobs``)


@dataclass(frozen=True)
class Outcome:
    row: asyncpg.Record
    children: dict[str, list[dict[str, Any]]] | None
    result: Any
    moved: tuple[str, str] | None  # (from, to)
    event: uuid.UUID | None
    approval: dict[str, Any] | None = None  # what a gated transition opened instead of moving


Render = Callable[[Outcome], idempotency.Answer]


def _values(resource: Any, row: asyncpg.Record) -> dict[str, Any]:
    """The locked row as field → value (system columns included) for conditions."""
    out: dict[str, Any] = {}
    for column in resource.table.columns:
        if column.name == "tenant_id":
            continue
        out[column.field or column.name] = row[column.name]
    if "docstatus" in out:
        out["docstatus"] = tables.DOCSTATUS[out["docstatus"]]
    return out


async def _reread(
    conn: db.Connection, resource: Any, tenant: uuid.UUID, record_id: uuid.UUID
) -> asyncpg.Record | None:
    """The record as this transaction sees it now (``None`` when the handler deleted it)."""
    statement, args = sql.select_one(resource.table, tenant, record_id)
    return await conn.fetchrow(statement, *args)


async def run(conn: db.Connection, call: Call, handler: Runner | None, render: Render) -> idempotency.Answer:
    """Run ``call`` in one transaction (see the module's docstring); the answer ``render`` made."""
    write, plan = call.write, call.plan
    resource, tenant = write.resource, write.tenant
    table = tables.quote(resource.table.name)
    state_column = resource.column(compiled.STATE)
    async with db.committed(conn):
        if call.idempotency is not None:
            stored = await idempotency.claim(conn, tenant, *call.idempotency)
            if stored is not None:
                return stored
        current = await guards.select_for_write(
            conn, resource, tenant, call.record_id, principal=call.principal, expected=call.expected
        )
        await guards.check_period(conn, resource, tenant, call.principal, current)  # a closed period
        moved: tuple[str, str] | None = None
        if plan.move is not None:
            assert state_column is not None
            before = machines.current(plan.move, current[state_column])
            moved = (before, machines.check(plan.name, plan.move, current[state_column], resource.workflow))
        if plan.declared is not None and plan.declared.conditions:
            values = _values(resource, current)
            values["params"] = call.params
            filling.check_guards(plan.conditions, plan.name, values, call.principal)
        if plan.move is not None and plan.move.gate is not None:
            opened = await approvals.request(conn, write, call.principal, plan, current)
            if opened is not None:  # waits for its votes: nothing moves now
                answer = render(Outcome(current, None, None, None, None, approvals.view(opened)))
                if call.idempotency is not None:
                    await idempotency.store(conn, tenant, *call.idempotency, answer)
                return answer
        trail = await auditing.begin(conn, write, plan.name, current)
        result = None
        reply: sidecars.Reply | None = None
        if isinstance(handler, sidecars.Bound):
            reply = await handler.invoker.invoke(
                sidecars.Invocation(
                    conn=conn,
                    tenant=tenant,
                    principal=call.principal.sub,
                    username=call.principal.username,
                    entity=resource.key,
                    action=plan.name,
                    record_id=call.record_id,
                    resource=reading.present(resource, current),
                    params={k: fieldvalues.to_json(plan.params[k], v) for k, v in call.params.items()},
                    timeout=handler.timeout,
                )
            )
            result = reply.data
            asked = sidecars.target(reply, plan, resource, current[state_column] if state_column else None)
            moved = moved or asked
        elif handler is not None:
            result = await handler(
                handlers.Context(
                    conn=conn,
                    tenant=tenant,
                    entity=resource.key,
                    action=plan.name,
                    record=call.access.view(reading.present(resource, current)),
                    params=call.params,
                    principal_sub=call.principal.sub,
                    principal_username=call.principal.username,
                    report=call.report,
                )
            )
        row = current
        if handler is not None and moved is None:
            # the handler may have written the record itself (a sidecar's /ctx ``entity update``
            # joins this transaction): the answer, its ETag and the event show it as it is now
            row = await _reread(conn, resource, tenant, call.record_id) or current
        if moved is not None:
            assert state_column is not None
            found = await conn.fetchrow(
                f"UPDATE {table} SET {tables.quote(state_column)} = $3, version = version + 1, "
                f"updated_at = now() WHERE tenant_id = $1 AND id = $2 "
                f"RETURNING {resource.table.select_columns}",
                tenant,
                call.record_id,
                moved[1],
            )
            assert found is not None
            row = found
            await caching.announce(conn, resource, tenant, call.record_id)  # every process, at commit
        await trail.finish(conn, row)
        kids = (
            await reading.load_children(conn, resource, tenant, [call.record_id], write.catalog)
            if resource.children
            else {}
        )
        event = None
        if plan.declared is not None and plan.declared.emits:
            payload: dict[str, Any] = {
                "record": reading.present(resource, row, kids.get(call.record_id)),
                "params": {k: fieldvalues.to_json(plan.params[k], v) for k, v in call.params.items()},
            }
            if moved is not None:
                payload["from"], payload["to"] = moved
            event = await outbox.emit(
                conn,
                tenant=tenant,
                entity=resource.key,
                record_id=call.record_id,
                action=plan.name,
                event=plan.declared.emits,
                payload=payload,
                actor_sub=write.sub,
                actor_username=write.username,
                request_id=write.request_id,
            )
        if reply is not None and reply.events:
            sent = await sidecars.record_events(
                conn,
                reply,
                tenant=tenant,
                entity=resource.key,
                record_id=call.record_id,
                action=plan.name,
                actor_sub=write.sub,
                actor_username=write.username,
                request_id=write.request_id,
            )
            event = event or sent[0]
        answer = render(Outcome(row, kids.get(call.record_id), result, moved, event))
        if call.idempotency is not None:
            await idempotency.store(conn, tenant, *call.idempotency, answer)
    return answer
