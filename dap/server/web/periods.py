"""The accounting-period endpoints (``workflows.periods``; the rule writes obey is ``access.periods``).

- ``GET /{ws}/api/_periods`` — the workspace's periods by first day (any signed-in caller: a
  form needs to know which dates are closed);
- ``POST /{ws}/api/_periods`` ``{"name", "starts", "ends", "final"?}`` — a new open period (201);
- ``POST /{ws}/api/_periods/{id}/start_closing`` ``{"reason"?}`` — only closers post in it now;
- ``POST /{ws}/api/_periods/{id}/close`` ``{"reason", "final"?}`` — no write dated in it;
- ``POST /{ws}/api/_periods/{id}/reopen`` ``{"reason"}`` — 409 ``SVC.PERIOD.REOPEN_DENIED`` for
  a final period or while a later one is closed;
- ``GET /{ws}/api/_periods/{id}/_audit`` — who created, closed and reopened it, and why;
- ``GET /{ws}/api/_periods/{id}/balances`` — the closing balances of every summary, written at
  the close (``[{"entity", "group": {field: value}, "sums": {field: "decimal text"}}]``).

Every write needs ``dap.periods.close`` (403 ``SVC.AUTH.FORBIDDEN``). The names start with ``_``
like ``_approvals``: no module can be called that, so no entity route is shadowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.access import periods as rule
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import periods

PATH = "/{ws}/api/_periods"


def _period_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        raise errors.NotFound("no such period", code=periods.NOT_FOUND) from exc


async def _body(request: web.Request) -> dict[str, Any]:
    return await requests.read_json(request) if request.body_exists else {}


def _actor(request: web.Request, principal: Any) -> periods.Actor:
    return periods.Actor(principal, request.get(state.REQUEST_ID))


async def list_periods(request: web.Request) -> web.Response:
    workspace, _, _ = await requests.resolve(request)
    async with db.connection(request.app[state.POOL]) as conn:
        data = await periods.listed(conn, workspace.tenant_id)
    return requests.reply({"data": data})


async def create_period(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    periods.allowed(catalog, principal)
    body = await _body(request)
    async with db.connection(request.app[state.POOL]) as conn:
        data = await periods.create(conn, workspace.tenant_id, _actor(request, principal), body)
    return requests.reply({"data": data}, status=201)


async def _move(request: web.Request, verb: str) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    periods.allowed(catalog, principal)
    period_id = _period_id(request)
    body = await _body(request)
    actor, tenant = _actor(request, principal), workspace.tenant_id
    async with db.connection(request.app[state.POOL]) as conn:
        if verb == "start_closing":
            data = await periods.start_closing(
                conn, tenant, actor, period_id, periods.reason_of(body, required=False)
            )
        elif verb == "close":
            final = body.get("final", False)
            if not isinstance(final, bool):
                raise errors.ValidationFailed(
                    "final must be true or false", errors=[errors.FieldProblem("final", "boolean")]
                )
            reason = periods.reason_of(body, required=True)
            assert reason is not None
            data = await periods.close(conn, catalog, tenant, actor, period_id, reason, final=final)
        else:
            reason = periods.reason_of(body, required=True)
            assert reason is not None
            data = await periods.reopen(conn, tenant, actor, period_id, reason)
    return requests.reply({"data": data})


async def start_closing(request: web.Request) -> web.Response:
    return await _move(request, "start_closing")


async def close(request: web.Request) -> web.Response:
    return await _move(request, "close")


async def reopen(request: web.Request) -> web.Response:
    return await _move(request, "reopen")


async def trail(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    periods.allowed(catalog, principal)
    period_id = _period_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        data = await periods.trail(conn, workspace.tenant_id, period_id)
    return requests.reply({"data": data})


async def balances(request: web.Request) -> web.Response:
    workspace, _, _ = await requests.resolve(request)
    period_id = _period_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        data = await periods.balances(conn, workspace.tenant_id, period_id)
    return requests.reply({"data": data})


def add_routes(app: web.Application) -> None:
    app.router.add_get(PATH, list_periods, allow_head=False)
    app.router.add_post(PATH, create_period)
    app.router.add_post(PATH + "/{id}/start_closing", start_closing)
    app.router.add_post(PATH + "/{id}/close", close)
    app.router.add_post(PATH + "/{id}/reopen", reopen)
    app.router.add_get(PATH + "/{id}/_audit", trail, allow_head=False)
    app.router.add_get(PATH + "/{id}/balances", balances, allow_head=False)


def applies(catalog: Catalog) -> bool:
    """Whether any entity of the catalog is judged by periods (the endpoints are documented then)."""
    return any(rule.field_of(r.spec) is not None for r in catalog.resources.values())


PERIOD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "name": {"type": "string"},
        "starts": {"type": "string", "format": "date"},
        "ends": {"type": "string", "format": "date"},
        "state": {"type": "string", "enum": ["open", "closing", "closed"]},
        "final": {"type": "boolean"},
        "closed_at": {"type": ["string", "null"], "format": "date-time"},
        "closed_by": {"type": ["string", "null"]},
        "reason": {"type": ["string", "null"]},
    },
}


def openapi_paths(responses: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI paths of the period endpoints (``responses`` adds the problem answers)."""
    ref = {"$ref": "#/components/schemas/Period"}
    one = {"application/json": {"schema": {"type": "object", "properties": {"data": ref}}}}
    many = {
        "application/json": {
            "schema": {"type": "object", "properties": {"data": {"type": "array", "items": ref}}}
        }
    }
    tag = ["Periods"]
    period_id = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
    reason = {"type": "string", "minLength": 1, "maxLength": 2000}

    def move(verb: str, summary: str, body: dict[str, Any], required: bool) -> dict[str, Any]:
        return {
            "parameters": [period_id],
            "post": {
                "operationId": f"{verb}_period",
                "tags": tag,
                "summary": summary,
                "requestBody": {"required": required, "content": {"application/json": {"schema": body}}},
                "responses": responses(
                    {"200": {"description": "moved", "content": one}}, 400, 403, 409, 415, 422
                ),
            },
        }

    create_body = {
        "type": "object",
        "required": ["name", "starts", "ends"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 100},
            "starts": {"type": "string", "format": "date"},
            "ends": {"type": "string", "format": "date"},
            "final": {"type": "boolean"},
        },
        "additionalProperties": False,
    }
    return {
        "/api/_periods": {
            "get": {
                "operationId": "list_periods",
                "tags": tag,
                "summary": "The workspace's accounting periods, by first day",
                "responses": responses({"200": {"description": "periods", "content": many}}),
            },
            "post": {
                "operationId": "create_period",
                "tags": tag,
                "summary": "Add an open accounting period (needs dap.periods.close)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": create_body}}},
                "responses": responses(
                    {"201": {"description": "created", "content": one}}, 400, 403, 409, 415, 422
                ),
            },
        },
        "/api/_periods/{id}/start_closing": move(
            "start_closing",
            "Start closing a period: only holders of dap.periods.post_closing post in it",
            {"type": "object", "properties": {"reason": reason}},
            False,
        ),
        "/api/_periods/{id}/close": move(
            "close",
            "Close a period: no write dated in it (final: true: never reopened)",
            {
                "type": "object",
                "required": ["reason"],
                "properties": {"reason": reason, "final": {"type": "boolean"}},
            },
            True,
        ),
        "/api/_periods/{id}/reopen": move(
            "reopen",
            "Reopen a period (409 SVC.PERIOD.REOPEN_DENIED: final, or a later period closed)",
            {"type": "object", "required": ["reason"], "properties": {"reason": reason}},
            True,
        ),
        "/api/_periods/{id}/balances": {
            "parameters": [period_id],
            "get": {
                "operationId": "period_balances",
                "tags": tag,
                "summary": "The closing balances of every summary entity, written when the period closed",
                "responses": responses(
                    {
                        "200": {
                            "description": "closing balances",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    }
                ),
            },
        },
        "/api/_periods/{id}/_audit": {
            "parameters": [period_id],
            "get": {
                "operationId": "period_trail",
                "tags": tag,
                "summary": "Who created, closed and reopened the period, and why, newest first",
                "responses": responses(
                    {
                        "200": {
                            "description": "audit rows",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                    403,
                ),
            },
        },
    }
