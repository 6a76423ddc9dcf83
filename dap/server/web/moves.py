"""``POST /{ws}/api/{module}/{entity}/{id}/{action}``: actions on one record.

Which action a path names, and the HTTP answer when it names none: 404 for an unknown or disabled
action (or one whose ``expose`` leaves out rest). ``submit``/``cancel`` of a lifecycle entity are
``documents.lifecycle.move`` (405 where the entity does not expose ``update``: such a move is a
write of the record). Custom actions and state-machine transitions are
``workflows.acting.record_action`` (:func:`_custom`; every protocol's): the JSON body is the
action's params, ``If-Match`` and ``Idempotency-Key`` (for ``idempotent`` actions) apply, a
``call: async`` one answers 202 with its job (``web.jobs``), and the answer is ``{"data": record,
"result": …}`` plus, for a transition, ``"transition": {"from", "to"}`` and, when it emitted one,
``"event"`` (the outbox id).
A transition gated by an approval answers 202 with ``"approval"`` (``workflows.approvals``): the
record does not move until the approval's last step reaches its quorum.
"""

from __future__ import annotations

from aiohttp import web

from dap.config.enums import ProtocolType
from dap.server import errors, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import lifecycle
from dap.server.events import builtin
from dap.server.storage.workspaces import Workspace
from dap.server.web import delivery, requests
from dap.server.workflows import acting, callbacks, operations, sidecars

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
    # 404 unless open to REST, 501s and 422 for a mismatched event before anything is read
    handler = acting.prepare(resource, plan, ProtocolType.REST, request.app.get(sidecars.INVOKER))
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    body = await requests.read_body(request) if request.body_exists else {}
    key = request.headers.get(acting.key_header(declared)) if declared is not None else None
    job = acting.is_async(declared)  # the body's text and a callback URL are a job's only
    raw = (await request.read()).decode() if job and request.body_exists else ""
    callback = callbacks.url_of(request.headers, declared.callback) if job and declared is not None else None
    call = requests.call(request, workspace, principal, catalog, resource)
    done = await acting.record_action(
        call,
        access,
        plan,
        handler,
        record_id,
        body,
        raw=raw,
        expected=expected,
        key=key,
        target=request.path_qs,
        ip=request.remote or "",
        queue=acting.Queue(request.app[state.WORKER], callback),
    )
    settled = None
    if declared is not None and declared.emits and done.event is not None:
        settled = await delivery.settle(request, resource, declared.emits, done.event)
    return delivery.stamp(requests.respond(done.answer), settled)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{ws}/api/{module}/{entity}/{id}/{action}", record_action)
