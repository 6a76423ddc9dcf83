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

from aiohttp import web

from dap.config.enums import CallMode
from dap.server import errors, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import idempotency, lifecycle
from dap.server.events import builtin
from dap.server.storage import db
from dap.server.storage.workspaces import Workspace
from dap.server.web import delivery, jobs, requests
from dap.server.workflows import actions, operations, sidecars

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
    call = requests.call(request, workspace, principal, catalog, resource)
    done = await operations.move(call, access, action, record_id, expected=expected)
    settled = await delivery.settle(request, resource, builtin.NAMES[action], done.event)
    return delivery.stamp(
        requests.reply({"data": done.data}, headers={"ETag": f'"{done.version}"'}),
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
    actions.parse_params(plan, body)  # 422 before anything is counted (operations.act parses again)
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
    call = requests.call(request, workspace, principal, catalog, resource)
    done = await operations.act(
        call,
        access,
        plan,
        handler,
        record_id,
        body,
        expected=expected,
        key=keyed[0] if keyed is not None else None,
        target=request.path_qs,
        ip=request.remote or "",
    )
    settled = None
    if declared is not None and declared.emits and done.event is not None:
        settled = await delivery.settle(request, resource, declared.emits, done.event)
    return delivery.stamp(requests.respond(done.answer), settled)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{ws}/api/{module}/{entity}/{id}/{action}", record_action)
