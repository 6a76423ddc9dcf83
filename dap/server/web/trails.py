"""``GET /{ws}/api/{module}/{entity}/{id}/_audit``: a record's audit rows, newest first.

The trail is read like the record: the route opens where ``find`` is exposed, asks find's
permission, looks the record up through :func:`dap.server.access.guards.select_record` (the find
handler's lookup, row scope included) and leaves out the changes of fields the caller may not
read, or that are no longer shown over REST. A deleted record's trail stays in ``dap.audit_log``
but is not served: there is no record left to decide who may read it. The rows themselves are
written by ``dap.server.documents.auditing``.
"""

from __future__ import annotations

from aiohttp import web

from dap.server import errors, state
from dap.server.access import guards
from dap.server.documents import auditing
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import filters

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def _page(request: web.Request) -> tuple[int, int]:
    """``limit`` and ``offset`` of the trail, bounded as a list's are."""
    limit, offset = request.query.get("limit"), request.query.get("offset")
    return (
        DEFAULT_LIMIT if limit is None else filters.integer("limit", limit, low=1, high=MAX_LIMIT),
        0 if offset is None else filters.integer("offset", offset, low=0, high=filters.MAX_OFFSET),
    )


async def trail_handler(request: web.Request) -> web.Response:
    """``GET /{ws}/api/{module}/{entity}/{id}/_audit``: the record's audit rows, newest first."""
    workspace, principal, catalog = await requests.resolve(request)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    if "find" not in resource.actions:
        raise errors.NotFound(
            f"{resource.key} does not expose find, so its records' trails are not served",
            code="SVC.ACTION.NOT_EXPOSED",
        )
    access = guards.check(principal, resource, "find")  # find's permission and hidden fields
    record_id = requests.parse_record_id(request)
    limit, offset = _page(request)
    async with db.connection(request.app[state.POOL]) as conn:
        await guards.select_record(conn, resource, workspace.tenant_id, record_id, principal=principal)
        rows = await conn.fetch(auditing.SELECT, workspace.tenant_id, resource.key, record_id, limit, offset)
    # only what the record shows this caller today: a field since hidden from REST, or one the
    # caller lacks the permission to read, stays out of the trail
    shown = {slot.name for slot in resource.slots} | {auditing.DOCSTATUS, "approval"}  # approval rows
    data = [
        {
            "id": str(r["public_id"]),
            "action": r["action"],
            "at": r["at"].isoformat(),
            "actor": {"sub": r["actor_sub"], "username": r["actor_username"]},
            "version": r["version"],
            "changes": access.view({k: v for k, v in r["changes"].items() if k in shown}),
            "request_id": r["request_id"],
        }
        for r in rows
    ]
    return requests.reply({"data": data, "limit": limit, "offset": offset})


async def _other_method(request: web.Request) -> web.Response:
    raise errors.MethodNotAllowed(f"{request.method} is not a method of the audit trail", allow=["GET"])


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/{module}/{entity}/{id}/_audit", trail_handler, allow_head=False)
    app.router.add_route("*", "/{ws}/api/{module}/{entity}/{id}/_audit", _other_method)
