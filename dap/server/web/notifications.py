"""In-app notifications of the caller: ``GET /{ws}/api/_notifications`` (``?all=true`` with the
read ones, ``?limit=``) and ``POST /{ws}/api/_notifications/read`` (``{"ids": [...]}``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

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


NOTIFICATION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "event_id": {"type": "string", "format": "uuid"},
        "entity": {"type": ["string", "null"], "description": "module/name"},
        "record_id": {"type": ["string", "null"], "format": "uuid"},
        "event": {"type": ["string", "null"]},
        "subject": {"type": ["string", "null"]},
        "body": {"type": ["string", "null"]},
        "created_at": {"type": "string", "format": "date-time"},
        "read_at": {"type": ["string", "null"], "format": "date-time"},
    },
}


def openapi_paths(responses: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI paths of the two routes (``responses`` adds the problem answers)."""
    tag = ["Notifications"]
    listing_ = {
        "type": "object",
        "properties": {"data": {"type": "array", "items": {"$ref": "#/components/schemas/Notification"}}},
    }
    ids = {
        "type": "object",
        "required": ["ids"],
        "properties": {"ids": {"type": "array", "items": {"type": "string", "format": "uuid"}}},
    }
    return {
        "/api/_notifications": {
            "get": {
                "operationId": "my_notifications",
                "tags": tag,
                "summary": "My notifications, newest first (unread ones unless all=true)",
                "parameters": [
                    {"name": "all", "in": "query", "schema": {"type": "boolean"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                ],
                "responses": responses(
                    {
                        "200": {
                            "description": "notifications",
                            "content": {"application/json": {"schema": listing_}},
                        }
                    },
                    422,
                ),
            }
        },
        "/api/_notifications/read": {
            "post": {
                "operationId": "read_notifications",
                "tags": tag,
                "summary": "Mark my notifications read",
                "requestBody": {"required": True, "content": {"application/json": {"schema": ids}}},
                "responses": responses(
                    {
                        "200": {
                            "description": "how many were unread",
                            "content": {
                                "application/json": {
                                    "schema": {"type": "object", "properties": {"read": {"type": "integer"}}}
                                }
                            },
                        }
                    },
                    400,
                    413,
                    415,
                    422,
                ),
            }
        },
    }
