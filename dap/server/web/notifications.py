"""In-app notifications of the caller: ``GET /{ws}/api/_notifications`` (``?all=true`` with the
read ones, ``?limit=``) and ``POST /{ws}/api/_notifications/read`` (``{"ids": [...]}``)."""

from __future__ import annotations

import uuid

from aiohttp import web

from dap.server import errors, state
from dap.server.events import notifications
from dap.server.storage import db
from dap.server.web import requests


async def listing(request: web.Request) -> web.Response:
    workspace, principal, _ = await requests.resolve(request)
    try:
        limit = min(500, max(1, int(request.query.get("limit", "50"))))
    except ValueError as exc:
        raise errors.ValidationFailed("limit is a whole number from 1 to 500") from exc
    async with db.connection(request.app[state.POOL]) as conn:
        found = await notifications.listing(
            conn,
            workspace.tenant_id,
            principal.username,
            include_read=request.query.get("all") == "true",
            limit=limit,
        )
    return requests.reply({"data": found})


async def mark_read(request: web.Request) -> web.Response:
    workspace, principal, _ = await requests.resolve(request)
    body = await requests.read_json(request)
    raw = body.get("ids") if isinstance(body, dict) else None
    try:
        assert isinstance(raw, list)
        ids = [uuid.UUID(str(i)) for i in raw]
    except (AssertionError, ValueError) as exc:
        raise errors.ValidationFailed(
            'expected {"ids": [notification id, ...]}', errors=[errors.FieldProblem("ids", "list of ids")]
        ) from exc
    async with db.connection(request.app[state.POOL]) as conn:
        count = await notifications.mark_read(conn, workspace.tenant_id, principal.username, ids)
    return requests.reply({"read": count})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/_notifications", listing, allow_head=False)
    app.router.add_post("/{ws}/api/_notifications/read", mark_read)
