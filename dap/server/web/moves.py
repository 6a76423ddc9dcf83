"""``POST /{ws}/api/{module}/{entity}/{id}/{action}``: actions on one record (submit and cancel today).

Which action a path names, and the HTTP answer when it names none: 404 for an unknown or disabled
action, 405 where the entity does not expose ``update`` (a move is a write of the record), 501 for
a declared custom action, which needs the app-process bridge this server does not host yet. The
move itself is ``documents.lifecycle.move``.
"""

from __future__ import annotations

from aiohttp import web

from dap.server import errors, state
from dap.server.access import guards
from dap.server.documents import lifecycle, reading
from dap.server.web import requests

_CRUD = frozenset({"list", "find", "create", "update", "delete"})


async def record_action(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    action = request.match_info["action"]
    if resource is None:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    declared = resource.spec.action(action)
    access = guards.check(principal, resource, action)  # required_permission (403), hidden fields
    if action not in lifecycle.MOVES or not resource.lifecycle:
        if declared is not None and action not in _CRUD and not declared.disabled:
            raise errors.NotImplementedHere(
                f"action {action!r} needs the app-process bridge, which this server does not run",
                code="SVC.ACTION.NOT_IMPLEMENTED",
            )
        raise errors.NotFound(f"{resource.key} has no action {action!r}", code="SVC.ACTION.NOT_FOUND")
    if declared is not None and declared.disabled:
        raise errors.NotFound(f"{resource.key} has disabled {action!r}", code="SVC.ACTION.NOT_FOUND")
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
    async with request.app[state.POOL].acquire() as conn:
        row = await lifecycle.move(conn, write, principal, action, record_id, expected=expected)
        kids = (
            await reading.load_children(conn, resource, tenant, [record_id], catalog)
            if resource.children
            else {}
        )
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    return requests.reply(
        {"data": access.view(reading.present(resource, row, kids.get(record_id)))},
        headers={"ETag": f'"{row["version"]}"'},
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{ws}/api/{module}/{entity}/{id}/{action}", record_action)
