"""The actions as protocol-neutral operations, beside ``operations``' verbs: jobs and services.

``operations`` holds the record verbs, the lifecycle moves and a synchronous custom action
(``operations.act``). This module adds what an action call needs beyond those, once for every
protocol (REST ``web.moves``/``web.services``/``web.jobs``, gRPC ``rpc.services``, the websocket's
``web.socket_calls``):

- :func:`exposed`/:func:`plan_of` -- an action's own ``expose`` filter and a service's action by
  name (404 ``SVC.ACTION.NOT_FOUND`` for one that is unknown, disabled or not open to the protocol);
- :func:`prepare` -- what runs a record action, decided before anything is read (501), and its
  ``emits`` event's type (422);
- :func:`record_action` -- a custom action or transition on one record: ``call: async`` queues a
  tracked job (rate limit, the record's row scope, the callback URL, then the job row in the
  transaction that keeps the idempotency key's answer: 202), else ``operations.act`` (200/202);
- :func:`admit`, :func:`service_handler` and :func:`service_action` -- a ``Service``'s action:
  the caller's permission (401/403), the grant of the app the call is made through
  (:func:`on_behalf`, ``workflows.granting``: 403 ``SVC.APP.GRANT_MISSING``), the runner (501),
  then params (422), ``rate_limit`` (429), and a job (202) or one transaction
  (``workflows.services``, 200 ``{"result", "event"}``);
- :func:`find_job` -- a job as its caller sees it (404 for anyone else).

Answers are ``idempotency.Answer`` (status, JSON text, headers): what an idempotent repeat replays,
over whichever protocol repeats it. The protocol decodes ids, params, ``If-Match``, the key and the
callback URL from its request, and encodes the answer.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from dap.config import offers
from dap.config.actions import Action
from dap.config.enums import CallMode, ProtocolType
from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import idempotency
from dap.server.events import plans
from dap.server.storage import db
from dap.server.storage.workspaces import Workspace
from dap.server.workflows import (
    actions,
    callbacks,
    granting,
    jobs,
    operations,
    sagas,
    services,
    sidecars,
    worker,
)

JOB_NOT_FOUND = "SVC.JOB.NOT_FOUND"
_NAMES = {ProtocolType.REST: "REST", ProtocolType.GRPC: "gRPC", ProtocolType.WS: "ws"}


def exposed(declared: Action | None, protocol: ProtocolType) -> bool:
    """Whether an action's own ``expose`` filter opens it to ``protocol`` (empty: every protocol
    its entity or service is exposed on). Pure."""
    return declared is None or not declared.expose or protocol in declared.expose


def is_async(declared: Action | None) -> bool:
    return declared is not None and declared.call is CallMode.ASYNC


def key_header(declared: Action) -> str:
    """The header (gRPC: metadata, lower-cased) naming an ``idempotent`` action's key."""
    return declared.idempotency_key.header if declared.idempotency_key else idempotency.HEADER


def sent_key(declared: Action | None, sent: str | None) -> str | None:
    """The idempotency key of an ``idempotent`` action as the caller sent it (400 when it is not a
    usable key); ``None`` for other actions, which ignore it."""
    if declared is None or not declared.idempotent or sent is None:
        return None
    header = key_header(declared)
    return idempotency.key_of({header: sent}, header)


def callback_header(declared: Action) -> str | None:
    """The header (gRPC: metadata, lower-cased) naming a job's callback URL, when it declares one."""
    return callbacks.header_of(declared.callback) if declared.callback is not None else None


def json_text(value: Any) -> str:
    """JSON text of decoded params, exact numbers (``Decimal``) written as numbers: a job keeps its
    params as text and reads them back with ``parse_float=Decimal`` (``jobs.decode``), as REST
    keeps the body it was sent."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return json.dumps(value)


def prepare(
    resource: Resource, plan: machines.ActionPlan, protocol: ProtocolType, invoker: sidecars.Invoker | None
) -> actions.Runner | None:
    """The checks of a custom record action that need nothing read: open to ``protocol`` (404),
    something to run it (501), its ``emits`` event of a fitting type (422)."""
    declared = plan.declared
    if not exposed(declared, protocol):
        raise errors.NotFound(
            f"{resource.key} does not expose {plan.name!r} over {_NAMES[protocol]}",
            code="SVC.ACTION.NOT_FOUND",
        )
    handler = actions.runner(resource.key, plan, invoker)
    if declared is not None and declared.emits is not None:
        plans.event_type(resource.spec, declared.emits, declared)
    return handler


@dataclass(frozen=True)
class Queue:
    """Where a job goes: the process's worker (woken at once) and the request's callback URL."""

    worker: worker.Worker
    callback_url: str | None = None


@dataclass(frozen=True)
class JobOrder:
    """One ``call: async`` call to queue (``kind`` ``entity`` with a record, or ``service``)."""

    slug: str
    tenant: uuid.UUID
    target: str  # module/name
    kind: str
    declared: Action
    record_id: uuid.UUID | None
    principal: auth.Principal
    keyed: tuple[str, bytes] | None
    raw: str  # the params as JSON text
    expected: int | None
    request_id: str | None


def job_path(slug: str, target: str, job_id: uuid.UUID) -> str:
    """A job's REST address (the ``Location`` of the 202; the other protocols name it by id)."""
    return f"/{slug}/api/{target}/_jobs/{job_id}"


async def enqueue(pool: asyncpg.Pool, queue: Queue, order: JobOrder) -> idempotency.Answer:
    """Queue the action as a job: 202 ``{"data": job}`` with its ``Location`` (or the stored answer
    of a repeated key). The callback URL is checked first (422 ``SVC.JOB.CALLBACK_REFUSED``; 501
    for a signed callback on a server with no secret). A saga is created with its job in one
    statement (``sagas.Engine.accept``; committed alone unless an ``Idempotency-Key`` joins it),
    held by this process's saga engine, which runs it after the commit."""
    declared, decl = order.declared, order.declared.callback
    url = queue.callback_url if decl is not None else None
    if url is not None and decl is not None:
        await callbacks.check(url, queue.worker.allow)
        if decl.sign and queue.worker.secret is None:
            raise errors.NotImplementedHere(
                f"{order.target}/{declared.name} signs its callbacks "
                "and this server has no --callback-secret",
                code="SVC.JOB.CALLBACK_NOT_SIGNED",
            )
    new = jobs.New(
        id=uuid.uuid4(),
        tenant=order.tenant,
        target=order.target,
        kind=order.kind,
        action=declared.name,
        record_id=order.record_id,
        principal=worker.principal_json(order.principal),
        body=order.raw or "{}",
        expected=order.expected,
        request_id=order.request_id,
        callback_url=url,
        callback_sign=bool(decl is not None and decl.sign),
        callback_retry=decl.retry.model_dump() if decl is not None and decl.retry is not None else None,
    )
    engine = queue.worker.sagas
    steps = sagas.declared_steps(declared) if engine is not None and order.kind == "service" else None
    if engine is not None and steps is not None and order.keyed is None:
        # the job and its saga are one statement, committed alone: no BEGIN and COMMIT round trips
        async with db.connection(pool) as conn:
            try:
                job, accepted = await engine.accept(conn, new, steps)
            except db.UNREACHABLE as exc:  # sent, then the connection broke: it may have committed
                raise db.outcome_unknown() from exc
        engine.take(accepted)  # the engine takes it on now that it committed
        return _queued(order, job)
    taken: sagas.Accepted | None = None
    async with db.connection(pool) as conn, db.committed(conn):
        stored = (
            await idempotency.claim(conn, order.tenant, *order.keyed) if order.keyed is not None else None
        )
        if stored is None:
            if engine is not None and steps is not None:  # the engine takes it on after the commit
                job, taken = await engine.accept(conn, new, steps)
            else:
                job = await jobs.enqueue(conn, new)
            stored = _queued(order, job)
            if order.keyed is not None:
                await idempotency.store(conn, order.tenant, *order.keyed, stored)
    if engine is not None and taken is not None:
        engine.take(taken)
    else:
        queue.worker.wake()
    return stored


def _queued(order: JobOrder, job: jobs.Job) -> idempotency.Answer:
    """The 202 of a queued job: the job, and its address as ``Location``."""
    return idempotency.Answer(
        202,
        operations.encode({"data": job.view()}).decode(),
        {"Location": job_path(order.slug, order.target, job.id)},
    )


async def record_action(
    call: operations.Call,
    access: guards.Access,
    plan: machines.ActionPlan,
    handler: actions.Runner | None,
    record_id: uuid.UUID,
    body: dict[str, Any],
    *,
    raw: str,
    expected: int | None,
    key: str | None,
    target: str,
    ip: str,
    queue: Queue,
) -> operations.Acted:
    """A custom action or transition on one record (:func:`prepare` passed): its params (422),
    then a job for ``call: async`` (202; its ``event`` is ``None``: the job emits it later) or
    ``operations.act``. ``raw`` is the params as sent (JSON text), ``key`` the idempotency key as
    sent (:func:`sent_key`), ``target`` the REST path every protocol fingerprints it with."""
    declared = plan.declared
    actions.parse_params(plan, body)  # 422 before anything is counted
    key = sent_key(declared, key)
    if declared is None or declared.call is not CallMode.ASYNC:
        return await operations.act(
            call, access, plan, handler, record_id, body, expected=expected, key=key, target=target, ip=ip
        )
    resource, tenant, principal = call.resource, call.tenant, call.principal
    async with db.connection(call.pool) as conn:
        await actions.limit(conn, resource.key, plan, tenant=tenant, sub=principal.sub, ip=ip)
        await guards.select_record(conn, resource, tenant, record_id, principal=principal)  # 403/404 now
    keyed = (key, idempotency.fingerprint(principal.sub, target, body)) if key is not None else None
    order = JobOrder(
        call.workspace.slug,
        tenant,
        resource.key,
        "entity",
        declared,
        record_id,
        principal,
        keyed,
        raw,
        expected,
        call.request_id,
    )
    return operations.Acted(await enqueue(call.pool, queue, order), None)


# --- service actions ---------------------------------------------------------------------


def plan_of(service: machines.ServicePlan, action: str, protocol: ProtocolType) -> machines.ActionPlan:
    """The service's action ``action`` open to ``protocol``; 404 for one unknown, disabled or whose
    ``expose`` leaves the protocol out."""
    plan = service.actions.get(action)
    declared = plan.declared if plan is not None else None
    if plan is None or declared is None or declared.disabled:
        raise errors.NotFound(f"{service.key} has no action {action!r}", code="SVC.ACTION.NOT_FOUND")
    if not exposed(declared, protocol):
        raise errors.NotFound(
            f"{service.key} does not expose {action!r} over {_NAMES[protocol]}", code="SVC.ACTION.NOT_FOUND"
        )
    return plan


def served_actions(service: machines.ServicePlan, protocol: ProtocolType) -> list[str]:
    """The names of the service's actions open to ``protocol``, sorted. Pure."""
    return sorted(
        name
        for name, plan in service.actions.items()
        if plan.declared is not None and not plan.declared.disabled and exposed(plan.declared, protocol)
    )


def service_handler(
    catalog: Catalog,
    principal: auth.Principal,
    service: machines.ServicePlan,
    plan: machines.ActionPlan,
    invoker: sidecars.Invoker | None,
) -> actions.Runner | None:
    """401/403 unless the caller may call it (``services.permit``), then what runs it (501)."""
    services.permit(catalog, principal, service, plan)
    return actions.runner(service.key, plan, invoker)


def on_behalf(
    catalog: Catalog, app: str | None, service: machines.ServicePlan, plan: machines.ActionPlan
) -> tuple[str, str] | None:
    """The (consumer, owner) whose grant a call made through ``app`` needs, or ``None`` when it
    needs none: a call through no app, through the app that offers the service, or to a service
    no app offers. 404 ``SVC.APP.NOT_FOUND`` for an app the catalog does not declare; 403
    ``SVC.APP.GRANT_MISSING`` when ``app`` does not declare consuming the action. Pure.

    ``app`` is where the client sent the call (a REST path prefix, gRPC metadata, a ws frame's
    field): it only ever narrows what the caller's own permissions allow, never widens it, so a
    client naming another app gains nothing it could not do by calling through no app at all.
    """
    if app is None:
        return None
    declared = catalog.apps.get(app)
    if declared is None:
        raise errors.NotFound(f"no app {app!r} is declared in this workspace", code=granting.APP_NOT_FOUND)
    offer = catalog.offers.get(service.key)
    if offer is None or offer.app == app:
        return None
    if plan.name not in offer.actions:
        raise granting.refusal(app, offer.app, service.key, plan.name, "not_offered")
    asked = offers.consumed(declared, app, offer.app, service.key)
    if asked is None or (asked and plan.name not in asked):
        raise granting.refusal(app, offer.app, service.key, plan.name, None)
    return app, offer.app


async def admit(
    pool: asyncpg.Pool,
    workspace: Workspace,
    catalog: Catalog,
    principal: auth.Principal,
    service: machines.ServicePlan,
    plan: machines.ActionPlan,
    app: str | None,
) -> None:
    """401/403 unless the caller may call the action (``services.permit``), then, for a call made
    through ``app``, 404/403 unless that app may (:func:`on_behalf`, the owner's grant read from
    ``dap.app_grants``). Before :func:`service_handler`'s 501: a refusal is the same whether or
    not this server can run the action."""
    services.permit(catalog, principal, service, plan)
    needed = on_behalf(catalog, app, service, plan)
    if needed is not None:
        async with db.connection(pool) as conn:
            await granting.check(conn, workspace.tenant_id, *needed, service.key, plan.name)


@dataclass(frozen=True)
class ServiceCall:
    """One call of a service action: where, who, and which action of which service."""

    pool: asyncpg.Pool
    workspace: Workspace
    principal: auth.Principal
    service: machines.ServicePlan
    plan: machines.ActionPlan
    request_id: str | None = None


async def service_action(
    call: ServiceCall,
    handler: actions.Runner | None,
    body: dict[str, Any],
    *,
    raw: str,
    key: str | None,
    target: str,
    ip: str,
    queue: Queue,
) -> idempotency.Answer:
    """Run a service action (:func:`admit` and :func:`service_handler` passed): params (422),
    ``rate_limit`` (429), then a job (202) for ``call: async``, else one transaction (200
    ``{"result", "event"?}``)."""
    plan, principal, tenant = call.plan, call.principal, call.workspace.tenant_id
    declared = plan.declared
    assert declared is not None
    params = actions.parse_params(plan, body)
    key = sent_key(declared, key)
    keyed = (key, idempotency.fingerprint(principal.sub, target, body)) if key is not None else None
    async with db.connection(call.pool) as conn:
        await actions.limit(conn, call.service.key, plan, tenant=tenant, sub=principal.sub, ip=ip)
    if declared.call is CallMode.ASYNC:
        order = JobOrder(
            call.workspace.slug,
            tenant,
            call.service.key,
            "service",
            declared,
            None,
            principal,
            keyed,
            raw,
            None,
            call.request_id,
        )
        return await enqueue(call.pool, queue, order)
    run = services.Call(
        service=call.service,
        plan=plan,
        tenant=tenant,
        principal=principal,
        params=params,
        call_id=uuid.uuid4(),
        request_id=call.request_id,
        idempotency=keyed,
    )
    async with db.connection(call.pool) as conn:
        return await services.run(conn, run, handler, services.answer)


# --- jobs ----------------------------------------------------------------------------------


async def find_job(
    pool: asyncpg.Pool, tenant: uuid.UUID, target: str, job_id: str, sub: str
) -> dict[str, Any]:
    """The job ``job_id`` of ``target`` (``module/name``) as its caller sees it: the caller who
    started it (same ``sub``), or anyone holding the id of one started anonymously; 404
    ``SVC.JOB.NOT_FOUND`` otherwise, as for an id that does not exist."""
    missing = errors.NotFound("no such job", code=JOB_NOT_FOUND)
    try:
        parsed = uuid.UUID(job_id)
    except ValueError as exc:
        raise missing from exc
    async with db.connection(pool) as conn:
        job = await jobs.find(conn, tenant, parsed)
    if job is None or job.row["target"] != target:
        raise missing
    owner = job.principal.get("sub", "")
    if owner and owner != sub:
        raise missing
    return job.view()


def finished(view: dict[str, Any]) -> bool:
    """Whether a job's view is final (``succeeded`` or ``failed``). Pure."""
    return view.get("state") in ("succeeded", "failed")
