"""``POST /{ws}/api/{module}/{entity}/{id}/{action}``: actions on one record.

Which action a path names, and the HTTP answer when it names none: 404 for an unknown or disabled
action (or one whose ``expose`` leaves out rest). ``submit``/``cancel`` of a lifecycle entity are
``documents.lifecycle.move`` (405 where the entity does not expose ``update``: such a move is a
write of the record). Custom actions and state-machine transitions are ``workflows.actions``
(:func:`_custom`): the JSON body is the action's params, ``If-Match`` and ``Idempotency-Key`` (for
``idempotent`` actions) apply, and the answer is ``{"data": record, "result": …}`` plus, for a
transition, ``"transition": {"from", "to"}`` and, when it emitted one, ``"event"`` (the outbox id).
A transition gated by an approval answers 202 with ``"approval"`` (``workflows.approvals``): the
record does not move until the approval's last step reaches its quorum.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import web

from dap.config.enums import CallMode
from dap.server import errors, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import idempotency, lifecycle, reading
from dap.server.events import builtin
from dap.server.storage import db
from dap.server.storage.workspaces import Workspace
from dap.server.web import delivery, jobs, requests
from dap.server.workflows import actions, sidecars

_CRUD = frozenset({"list", "find", "create", "update", "delete"})


async def record_action(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    action = request.match_info["action"]
    if resource is None:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    declared = resource.spec.action(action)
    access = guards.check(principal, resource, action)  # required_permission (403), hidden fields
    if declared is not None and declared.disabled:
        raise errors.NotFound(f"{resource.key} has disabled {action!r}", code="SVC.ACTION.NOT_FOUND")
    plan = resource.workflow.get(action)
    if plan is not None and action not in _CRUD and not (action in lifecycle.MOVES and resource.lifecycle):
        return await _custom(request, workspace, principal, catalog, resource, access, plan)
    if action not in lifecycle.MOVES or not resource.lifecycle:
        raise errors.NotFound(f"{resource.key} has no action {action!r}", code="SVC.ACTION.NOT_FOUND")
    if not lifecycle.move_open(resource, action):
        raise errors.MethodNotAllowed(
            f"{resource.key} does not expose update, so {action} is closed",
            code="SVC.ACTION.NOT_EXPOSED",
            allow=[],
        )
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    tenant = workspace.tenant_id
    write = requests.write_of(request, principal, catalog, resource, tenant)
    emitted: list[uuid.UUID] = []

    async def emit(conn: db.Connection, row: Any, kids: dict[str, list[dict[str, Any]]] | None) -> None:
        emitted.append(await builtin.record(conn, write, action, row, kids))

    async with db.connection(request.app[state.POOL]) as conn:
        row, kids = await lifecycle.move(
            conn, write, principal, action, record_id, expected=expected, after=emit
        )
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    settled = await delivery.settle(request, resource, builtin.NAMES[action], emitted[0] if emitted else None)
    return delivery.stamp(
        requests.reply(
            {"data": access.view(reading.present(resource, row, kids))},
            headers={"ETag": f'"{row["version"]}"'},
        ),
        settled,
    )


async def _custom(
    request: web.Request,
    workspace: Workspace,
    principal: auth.Principal,
    catalog: Catalog,
    resource: Resource,
    access: guards.Access,
    plan: machines.ActionPlan,
) -> web.Response:
    declared = plan.declared
    if declared is not None and declared.expose and "rest" not in declared.expose:
        raise errors.NotFound(
            f"{resource.key} does not expose {plan.name!r} over REST", code="SVC.ACTION.NOT_FOUND"
        )
    # 501s before anything is read or counted
    handler = actions.runner(resource.key, plan, request.app.get(sidecars.INVOKER))
    if declared is not None and declared.emits is not None:
        delivery.check(resource, declared.emits, declared)  # 422 for a sync event of an async action
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    body = await requests.read_body(request) if request.body_exists else {}
    params = actions.parse_params(plan, body)
    keyed = None
    if declared is not None and declared.idempotent:
        header = declared.idempotency_key.header if declared.idempotency_key else idempotency.HEADER
        key = idempotency.key_of(request.headers, header)
        if key is not None:
            keyed = (key, idempotency.fingerprint(principal.sub, request.path_qs, body))
    tenant = workspace.tenant_id
    if declared is not None and declared.call is CallMode.ASYNC:  # a tracked job (web.jobs)
        async with db.connection(request.app[state.POOL]) as conn:
            await actions.limit(
                conn, resource.key, plan, tenant=tenant, sub=principal.sub, ip=request.remote or ""
            )
            await guards.select_record(conn, resource, tenant, record_id, principal=principal)  # 403/404 now
        return await jobs.start(
            request,
            slug=workspace.slug,
            tenant=tenant,
            target=resource.key,
            kind="entity",
            declared=declared,
            record_id=record_id,
            principal=principal,
            keyed=keyed,
        )
    call = actions.Call(
        write=requests.write_of(request, principal, catalog, resource, tenant),
        principal=principal,
        access=access,
        plan=plan,
        record_id=record_id,
        params=params,
        expected=expected,
        idempotency=keyed,
    )

    def render(outcome: actions.Outcome) -> idempotency.Answer:
        data: dict[str, object] = {
            "data": access.view(reading.present(resource, outcome.row, outcome.children)),
            "result": outcome.result,
        }
        if outcome.moved is not None:
            data["transition"] = {"from": outcome.moved[0], "to": outcome.moved[1]}
        if outcome.event is not None:
            data["event"] = str(outcome.event)
        if outcome.approval is not None:  # a gated transition: accepted, waiting for its votes
            data["approval"] = outcome.approval
        status = 202 if outcome.approval is not None else 200
        return idempotency.Answer(status, requests.dumps(data), {"ETag": f'"{outcome.row["version"]}"'})

    async with db.connection(request.app[state.POOL]) as conn:
        await actions.limit(
            conn, resource.key, plan, tenant=tenant, sub=principal.sub, ip=request.remote or ""
        )
        answer = await actions.run(conn, call, handler, render)
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    event = json.loads(answer.body).get("event") if declared is not None and declared.emits else None
    settled = None
    if declared is not None and declared.emits and event:
        settled = await delivery.settle(request, resource, declared.emits, uuid.UUID(event))
    return delivery.stamp(requests.respond(answer), settled)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{ws}/api/{module}/{entity}/{id}/{action}", record_action)
