"""Actions implemented by the app process (``impl.type: sidecar``): the server's side of the bridge.

The server never imports ``dap.bridge`` (an import-linter contract says so). It names here what it
needs from whoever talks to the app process: an :class:`Invoker`, which the process entry point
(``dap serve`` through ``dap.bridge.hosting``) stores under :data:`INVOKER` in the application when
``--sidecar-endpoint`` is given. Without one, a sidecar action is the clear 501 naming the option.

An invoke runs inside the action's transaction (``workflows.actions.run``): the invoker receives
the transaction's connection in :class:`Invocation` and lets the app's ``/ctx`` calls that echo the
scope id join it, so the invoke's outcome commits or rolls back all of it. What the app answers,
:class:`Reply`, is applied here: ``new_state`` through the entity's state machine (a declared
transition from the current state, checked by ``machines``), each event into ``dap.outbox``.
A reply is judged whole before any of it is applied (:func:`target`): each event it returns must
be declared in the entity's ``spec.events`` or be a built-in one (422 ``SVC.EVENT.TYPE_MISSING``),
and a ``sync`` event cannot come from an action called ``async`` (422 ``SVC.EVENT.TYPE_MISMATCH``);
either rolls the action back (``events.plans.event_type``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from dap.server import errors
from dap.server.catalog import Resource
from dap.server.catalog import machines as compiled
from dap.server.events import outbox, plans
from dap.server.storage import db
from dap.server.workflows import machines

NOT_CONFIGURED = "SVC.ACTION.SIDECAR_NOT_CONFIGURED"
BAD_REPLY = "SVC.SIDECAR.BAD_REPLY"


@dataclass(frozen=True)
class Event:
    name: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """A 200 of the app process: ``{data, new_state, events}``."""

    data: Any = None
    new_state: str | None = None
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Invocation:
    """One sidecar invoke: what the app is sent, and the transaction its ``/ctx`` calls join."""

    conn: db.Connection  # the action's transaction; the record's row is locked
    tenant: uuid.UUID
    principal: str  # the caller's ``sub``
    username: str
    entity: str  # module/name
    action: str
    record_id: uuid.UUID | None  # None: a service action
    resource: Mapping[str, Any] | None  # the record as stored, in its JSON form; None: a service action
    params: Mapping[str, Any] = field(default_factory=dict)  # JSON form
    timeout: float | None = None  # the action's impl.timeout; None: the process's --invoke-timeout
    idempotency_key: str | None = None  # a saga step's key, sent as ``Idempotency-Key``
    # awaited before the first /ctx statement joins ``conn``, which is then not yet in a
    # transaction (a saga step begins it only if the app uses it); None: ``conn`` is in one already
    begin: Callable[[], Awaitable[None]] | None = None


class Invoker(Protocol):
    """Runs an action in the app process; raises an ``errors.ApiError`` when it cannot."""

    async def invoke(self, call: Invocation) -> Reply: ...


INVOKER: web.AppKey[Invoker] = web.AppKey("sidecar_invoker")


@dataclass(frozen=True)
class Bound:
    """What runs a sidecar action: the process's invoker and the action's own timeout, if any."""

    invoker: Invoker
    timeout: float | None


def not_configured(entity: str, action: str) -> errors.NotImplementedHere:
    return errors.NotImplementedHere(
        f"action {action!r} of {entity} is implemented by the app process (impl.type sidecar), and no "
        "--sidecar-endpoint is connected: start `dap serve --sidecar-endpoint unix:///path/app.sock` "
        "(or http://127.0.0.1:PORT) with the app process listening there",
        code=NOT_CONFIGURED,
    )


def target(
    reply: Reply, plan: compiled.ActionPlan, resource: Resource, stored: str | None
) -> tuple[str, str] | None:
    """The (from, to) move the reply asks for on top of the action's own; None: no move.

    An action that is a transition moves where the machine says; a ``new_state`` that differs is a
    bad reply. Any other action may move the record along a declared transition from its current
    state to ``new_state`` (409 when none leads there). The reply's events are checked first
    (:func:`check_events`): a reply is judged whole before any of it is applied.
    """
    check_events(reply, plan, resource)
    wanted = reply.new_state
    if plan.move is not None:
        if wanted is not None and wanted != plan.move.to:
            raise errors.InternalError(
                f"the app answered new_state {wanted!r} for {plan.name}, which is the transition "
                f"{plan.move.name!r} to {plan.move.to!r}",
                code=BAD_REPLY,
            )
        return None  # the transition itself is applied by ``actions.run``
    if wanted is None:
        return None
    moves = [p.move for p in resource.workflow.values() if p.move is not None]
    if not moves:
        raise errors.InternalError(
            f"the app answered new_state {wanted!r}, but {resource.key} has no state machine",
            code=BAD_REPLY,
        )
    now = machines.current(moves[0], stored)
    if wanted == now:
        return None
    if not any(m.to == wanted and now in m.origins and not m.gated for m in moves):
        raise errors.Conflict(
            f"the app asked to move this {resource.key} from {now!r} to {wanted!r}, and no transition "
            "of its state machine leads there",
            code=machines.NOT_ALLOWED,
            errors=[errors.FieldProblem(compiled.STATE, f"is {now!r}; no transition to {wanted!r}")],
        )
    return (now, wanted)


def check_events(reply: Reply, plan: compiled.ActionPlan, resource: Resource) -> None:
    """Every event of ``reply`` has a type: declared or built-in (else 422 ``TYPE_MISSING``), and
    not ``sync`` from an action called ``async`` (422 ``TYPE_MISMATCH``)."""
    for e in reply.events:
        plans.event_type(resource.spec, e.name, plan.declared)


async def record_events(
    conn: db.Connection,
    reply: Reply,
    *,
    tenant: uuid.UUID,
    entity: str,
    record_id: uuid.UUID | None,
    action: str,
    actor_sub: str,
    actor_username: str,
    request_id: str | None,
) -> list[uuid.UUID]:
    """The reply's events in ``dap.outbox``, in the action's transaction; their public ids."""
    return [
        await outbox.emit(
            conn,
            tenant=tenant,
            entity=entity,
            record_id=record_id,
            action=action,
            event=e.name,
            payload=e.payload,
            actor_sub=actor_sub,
            actor_username=actor_username,
            request_id=request_id,
        )
        for e in reply.events
    ]
