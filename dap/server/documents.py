"""Document lifecycle actions: ``POST /{ws}/api/{module}/{entity}/{id}/submit`` and ``.../cancel``.

Entities with ``lifecycle: true`` move draft → submitted → cancelled. Both moves are writes of
the record, so they are open where the entity exposes ``update`` over REST. The transition runs
in one transaction on the row locked ``FOR UPDATE``; the canonical ``SVC.DOC.*`` codes answer a
move from the wrong state (409). Custom actions need the app-process bridge, which this server
does not host yet: a declared action answers 501, an undeclared one 404.
"""

from __future__ import annotations

from aiohttp import web

from dap.server import errors, rest, state, tables

DRAFT, SUBMITTED, CANCELLED = 0, 1, 2
# action -> (state required, state reached, code per wrong current state)
MOVES: dict[str, tuple[int, int, dict[int, str]]] = {
    "submit": (
        DRAFT,
        SUBMITTED,
        {SUBMITTED: "SVC.DOC.ALREADY_SUBMITTED", CANCELLED: "SVC.DOC.SUBMIT_NOT_DRAFT"},
    ),
    "cancel": (
        SUBMITTED,
        CANCELLED,
        {DRAFT: "SVC.DOC.CANCEL_NOT_SUBMITTED", CANCELLED: "SVC.DOC.ALREADY_CANCELLED"},
    ),
}


async def record_action(request: web.Request) -> web.Response:
    workspace, _principal, catalog = await rest.resolve(request)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    action = request.match_info["action"]
    if resource is None:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    move = MOVES.get(action) if resource.lifecycle else None
    if move is None:
        if resource.spec.action(action) is not None:
            raise errors.NotImplementedHere(
                f"action {action!r} needs the app-process bridge, which this server does not run",
                code="SVC.ACTION.NOT_IMPLEMENTED",
            )
        raise errors.NotFound(f"{resource.key} has no action {action!r}", code="SVC.ACTION.NOT_FOUND")
    if "update" not in resource.actions:
        raise errors.MethodNotAllowed(f"{resource.key} does not expose update", code="SVC.ACTION.NOT_EXPOSED")
    required, reached, wrong = move
    record_id = rest.parse_record_id(request)
    expected = rest.if_match(request)
    tenant = workspace.tenant_id
    table = tables.quote(resource.table.name)
    async with request.app[state.POOL].acquire() as conn, conn.transaction():
        current = await conn.fetchrow(
            f"SELECT version, docstatus FROM {table} WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
            tenant,
            record_id,
        )
        if current is None:
            raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND")
        if expected is not None and current["version"] != expected:
            raise errors.PreconditionFailed(f"the record is at version {current['version']}, not {expected}")
        if current["docstatus"] != required:
            now = tables.DOCSTATUS[current["docstatus"]]
            raise errors.Conflict(f"cannot {action} a {now} document", code=wrong[current["docstatus"]])
        row = await conn.fetchrow(
            f"UPDATE {table} SET docstatus = $3, version = version + 1, updated_at = now() "
            f"WHERE tenant_id = $1 AND id = $2 RETURNING {resource.table.select_columns}",
            tenant,
            record_id,
            reached,
        )
        assert row is not None
        kids = (
            await rest.load_children(conn, resource, tenant, [record_id], catalog)
            if resource.children
            else {}
        )
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    return rest.reply(
        {"data": rest.present(resource, row, kids.get(record_id))}, headers={"ETag": f'"{row["version"]}"'}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{ws}/api/{module}/{entity}/{id}/{action}", record_action)
