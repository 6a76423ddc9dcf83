"""One service action (``POST /{ws}/api/{module}/{service}/{action}``): no record, one transaction.

The same rules as a record action (``workflows.actions``) minus the record: the ``Idempotency-Key``
claimed first, the ``conditions`` checked on the params (``params.*``) and ``session.*``, the native
handler run (``record`` is ``None`` in its context), one audit row when the action declares
``audit`` (``dap.audit_log`` with ``entity`` the service's ``module/name`` and ``record_id`` the
call's id, ``changes: {"params": [null, params]}``), the ``emits`` event written to ``dap.outbox``
(``record_id`` null, payload ``params`` and ``result``), and the answer stored under the key, all
committed together or not at all. What runs it is ``actions.runner``: a native handler, or the app
process (``impl.type: sidecar``) through the process's ``sidecars.Invoker`` — the invoke's scope is
this transaction (``resource_id`` and ``resource`` null), the reply's ``data`` is the result and
its events go to ``dap.outbox`` with the others; a ``new_state`` is a bad reply (no record).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dap.server import errors, fieldvalues
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.catalog import machines as compiled
from dap.server.documents import auditing, filling, idempotency
from dap.server.events import outbox
from dap.server.storage import db
from dap.server.workflows import handlers, sidecars


@dataclass(frozen=True)
class Call:
    """One request of a service action."""

    service: compiled.ServicePlan
    plan: compiled.ActionPlan
    tenant: uuid.UUID
    principal: auth.Principal
    params: dict[str, Any]  # validated
    call_id: uuid.UUID  # the audit row's record_id; a job's id when run as one
    request_id: str | None
    idempotency: tuple[str, bytes] | None = None  # key, fingerprint
    report: handlers.Report | None = None


@dataclass(frozen=True)
class Outcome:
    result: Any
    event: uuid.UUID | None


Render = Callable[[Outcome], idempotency.Answer]


FORBIDDEN = "SVC.AUTH.FORBIDDEN"


def permit(
    catalog: Catalog, principal: auth.Principal, service: compiled.ServicePlan, plan: compiled.ActionPlan
) -> None:
    """401/403 unless ``principal`` may call ``plan``: a token (or ``public: true``), and the
    ``required_permission`` when one is declared."""
    declared = plan.declared
    assert declared is not None
    anonymous = not principal.sub
    needed = declared.required_permission
    if anonymous and not declared.public:
        raise errors.Unauthorized(
            f"{service.key}/{plan.name} is not public; send 'Authorization: Bearer <token>'"
        )
    if needed is not None and not catalog.grants.allows(principal.roles, needed):
        detail = f"{plan.name} on {service.key} needs the permission {needed}"
        if anonymous:
            raise errors.Unauthorized(f"{detail}; send 'Authorization: Bearer <token>'")
        raise errors.Forbidden(detail, code=FORBIDDEN)


def answer(outcome: Outcome) -> idempotency.Answer:
    """A service action's answer: ``{"result"}`` and the emitted ``event``'s id when there is one."""
    data: dict[str, Any] = {"result": outcome.result}
    if outcome.event is not None:
        data["event"] = str(outcome.event)
    return idempotency.Answer(200, json.dumps(data, default=db.json_default, separators=(",", ":")), {})


def params_json(plan: compiled.ActionPlan, params: dict[str, Any]) -> dict[str, Any]:
    return {k: fieldvalues.to_json(plan.params[k], v) for k, v in params.items()}


async def _invoke(conn: db.Connection, call: Call, bound: sidecars.Bound) -> sidecars.Reply:
    """The app process runs the action inside this transaction; a ``new_state`` is refused."""
    reply = await bound.invoker.invoke(
        sidecars.Invocation(
            conn=conn,
            tenant=call.tenant,
            principal=call.principal.sub,
            username=call.principal.username,
            entity=call.service.key,
            action=call.plan.name,
            record_id=None,
            resource=None,
            params=params_json(call.plan, call.params),
            timeout=bound.timeout,
        )
    )
    if reply.new_state is not None:
        raise errors.InternalError(
            f"the app answered new_state {reply.new_state!r} for {call.service.key}/{call.plan.name}, "
            "a service action, which has no record to move",
            code=sidecars.BAD_REPLY,
        )
    return reply


async def run(
    conn: db.Connection, call: Call, handler: handlers.Handler | sidecars.Bound | None, render: Render
) -> idempotency.Answer:
    """Run ``call`` in one transaction (see the module's docstring); the answer ``render`` made."""
    plan, declared = call.plan, call.plan.declared
    assert declared is not None  # a service action is always declared
    async with db.committed(conn):
        if call.idempotency is not None:
            stored = await idempotency.claim(conn, call.tenant, *call.idempotency)
            if stored is not None:
                return stored
        if declared.conditions:
            filling.check_guards(plan.conditions, plan.name, {"params": call.params}, call.principal)
        result = None
        reply: sidecars.Reply | None = None
        if isinstance(handler, sidecars.Bound):
            reply = await _invoke(conn, call, handler)
            result = reply.data
        elif handler is not None:
            result = await handler(
                handlers.Context(
                    conn=conn,
                    tenant=call.tenant,
                    entity=call.service.key,
                    action=plan.name,
                    record=None,
                    params=call.params,
                    principal_sub=call.principal.sub,
                    principal_username=call.principal.username,
                    report=call.report,
                )
            )
        shown = params_json(plan, call.params)
        if declared.audit:
            await conn.execute(
                auditing.INSERT,
                call.tenant,
                call.service.key,
                call.call_id,
                plan.name,
                call.principal.sub,
                call.principal.username,
                None,
                {"params": [None, shown]},
                call.request_id,
            )
        event = None
        if declared.emits:
            event = await outbox.emit(
                conn,
                tenant=call.tenant,
                entity=call.service.key,
                record_id=None,
                action=plan.name,
                event=declared.emits,
                payload={"params": shown, "result": result},
                actor_sub=call.principal.sub,
                actor_username=call.principal.username,
                request_id=call.request_id,
            )
        if reply is not None and reply.events:
            sent = await sidecars.record_events(
                conn,
                reply,
                tenant=call.tenant,
                entity=call.service.key,
                record_id=None,
                action=plan.name,
                actor_sub=call.principal.sub,
                actor_username=call.principal.username,
                request_id=call.request_id,
            )
            event = event or sent[0]
        answer = render(Outcome(result, event))
        if call.idempotency is not None:
            await idempotency.store(conn, call.tenant, *call.idempotency, answer)
    return answer
