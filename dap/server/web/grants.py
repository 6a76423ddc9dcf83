"""The grant requests between apps (``workflows.granting``), and service calls made through an app.

- ``GET /{ws}/api/_grants`` — the grant requests made to the apps the caller administers (the
  permission ``<module>.<app>.administer``, ``admin`` holds it), newest first; ``?status=pending``
  (granted, refused, revoked) and ``?owner=module/name`` narrow them: ``{"data": [request]}``.
- ``GET /{ws}/api/_grants/{id}`` — one of them; ``…/{id}/_audit`` its audit rows, newest first.
- ``POST /{ws}/api/_grants/{id}/grant`` ``{"reason"?, "actions"?}``, ``…/refuse`` ``{"reason"}``,
  ``…/revoke`` ``{"reason"}`` — a decision: ``{"data": request}``; each is audited.
- ``POST /{ws}/api/_apps/{app_module}/{app}/{module}/{service}/{action}`` — a service action called
  through an app (``web.services``): refused 403 ``SVC.APP.GRANT_MISSING`` while the app lacks
  the owner's grant for it.

The names start with ``_`` like ``_approvals``: no module is called that, so the routes never
shadow an entity's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dap.config import offers
from dap.server import errors, state
from dap.server.access import guards
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.web import requests, services
from dap.server.workflows import granting

STATUSES = ("pending", "granted", "refused", "revoked")


def _grant_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        raise errors.NotFound("no such grant request", code=granting.GRANT_NOT_FOUND) from exc


async def _caller(request: web.Request) -> tuple[uuid.UUID, Any, list[str]]:
    workspace, principal, catalog = await requests.resolve(request)
    if guards.is_anonymous(principal):
        raise errors.Unauthorized("grant requests need 'Authorization: Bearer <token>'")
    return workspace.tenant_id, principal, granting.administered(catalog, principal)


async def list_requests(request: web.Request) -> web.Response:
    tenant, _, owners = await _caller(request)
    status = request.query.get("status")
    if status is not None and status not in STATUSES:
        raise errors.BadRequest(
            f"status {status!r} is none of {', '.join(STATUSES)}", code="SVC.REQUEST.BAD_QUERY"
        )
    owner = request.query.get("owner")
    if owner is not None:
        owners = [o for o in owners if o == owner]
    async with db.connection(request.app[state.POOL]) as conn:
        data = await granting.listed(conn, tenant, owners, status) if owners else []
    return requests.reply({"data": data})


async def find_request(request: web.Request) -> web.Response:
    tenant, _, owners = await _caller(request)
    grant_id = _grant_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        row = await granting.found(conn, tenant, grant_id)
        if row is None or row["owner"] not in owners:
            raise errors.NotFound(
                "no such grant request among those of the apps you administer", code=granting.GRANT_NOT_FOUND
            )
        if request.match_info.get("trail"):
            return requests.reply({"data": await granting.trail(conn, tenant, grant_id)})
    return requests.reply({"data": granting.view(row)})


def _target(verb: granting.Verb, body: Any) -> granting.Target:
    if not isinstance(body, dict):
        raise errors.BadRequest("the body is a JSON object", code="SVC.REQUEST.BAD_BODY")
    reason, actions = body.get("reason"), body.get("actions")
    if reason is not None and not isinstance(reason, str):
        raise errors.ValidationFailed("reason is a string", code=granting.REASON_REQUIRED)
    if actions is not None and (
        verb != "grant" or not isinstance(actions, list) or not all(isinstance(a, str) for a in actions)
    ):
        raise errors.ValidationFailed(
            "actions is a list of action names, given with grant only", code="SVC.APP.GRANT_NOT_ASKED"
        )
    return granting.Target(verb, reason, tuple(actions) if actions is not None else None)


def _decision(verb: granting.Verb) -> Callable[[web.Request], Any]:
    async def decide(request: web.Request) -> web.Response:
        tenant, principal, owners = await _caller(request)
        grant_id = _grant_id(request)
        body = await requests.read_body(request) if request.body_exists else {}
        target = _target(verb, body)
        async with db.connection(request.app[state.POOL]) as conn:
            data = await granting.decide(
                conn, tenant, grant_id, target, principal, owners, request.get(state.REQUEST_ID)
            )
        return requests.reply({"data": data})

    return decide


async def through_app(request: web.Request) -> web.Response:
    """A service action called through an app (``web.services``); any other path is 404."""
    catalog = request.app[state.SPEC].current
    match = request.match_info
    if services.target(catalog, match["module"], match["entity"]) != "service":
        raise errors.NotFound(
            "only a service action is called through an app:"
            " /_apps/{app_module}/{app}/{module}/{service}/{action}",
            code="SVC.ACTION.NOT_FOUND",
        )
    return await services.service_action(request)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/_grants", list_requests, allow_head=False)
    app.router.add_get("/{ws}/api/_grants/{id}", find_request, allow_head=False)
    app.router.add_get("/{ws}/api/_grants/{id}/{trail:_audit}", find_request, allow_head=False)
    verbs: tuple[granting.Verb, ...] = ("grant", "refuse", "revoke")
    for verb in verbs:
        app.router.add_post(f"/{{ws}}/api/_grants/{{id}}/{verb}", _decision(verb))
    app.router.add_post("/{ws}/api/_apps/{app_module}/{app}/{module}/{entity}/{id}", through_app)


GRANT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "consumer": {"type": "string", "description": "the asking app, module/name"},
        "owner": {"type": "string", "description": "the app offering the service, module/name"},
        "service": {"type": "string", "description": "module/name"},
        "actions": {"type": "array", "items": {"type": "string"}, "description": "what is asked"},
        "granted": {"type": "array", "items": {"type": "string"}, "description": "what is granted"},
        "status": {"type": "string", "enum": list(STATUSES)},
        "reason": {"type": ["string", "null"]},
        "requested_by": {"type": "string", "description": "the boot or deployment that asked"},
        "requested_at": {"type": "string", "format": "date-time"},
        "decided_by": {"type": ["string", "null"]},
        "decided_at": {"type": ["string", "null"], "format": "date-time"},
    },
}


def openapi_paths(
    catalog: Catalog, paths: dict[str, Any], responses: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    """The grant endpoints and each consuming app's service paths (a copy of the service action's
    own path, ``paths``, under ``/api/_apps/{app}``), when an app offers a service."""
    if not catalog.offers:
        return {}
    ref = {"$ref": "#/components/schemas/AppGrant"}
    one = {"application/json": {"schema": {"type": "object", "properties": {"data": ref}}}}
    many = {
        "application/json": {
            "schema": {"type": "object", "properties": {"data": {"type": "array", "items": ref}}}
        }
    }
    grant_id = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
    tag = ["App grants"]

    def step(verb: str) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "object", "properties": {"reason": {"type": "string"}}}
        if verb == "grant":
            body["properties"]["actions"] = {"type": "array", "items": {"type": "string"}}
        else:
            body["required"] = ["reason"]
        return {
            "parameters": [grant_id],
            "post": {
                "operationId": f"{verb}_app_grant",
                "tags": tag,
                "summary": f"{verb.capitalize()} a grant request (an administrator of the owning app)",
                "requestBody": {
                    "required": verb != "grant",
                    "content": {"application/json": {"schema": body}},
                },
                "responses": responses({"200": {"description": "decided", "content": one}}, 400, 409, 422),
            },
        }

    out: dict[str, Any] = {
        "/api/_grants": {
            "get": {
                "operationId": "list_app_grants",
                "tags": tag,
                "summary": "Grant requests made to the apps I administer, newest first",
                "parameters": [
                    {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)}},
                    {
                        "name": "owner",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "module/name",
                    },
                ],
                "responses": responses({"200": {"description": "grant requests", "content": many}}, 400),
            }
        },
        "/api/_grants/{id}": {
            "parameters": [grant_id],
            "get": {
                "operationId": "find_app_grant",
                "tags": tag,
                "summary": "One grant request",
                "responses": responses({"200": {"description": "the request", "content": one}}),
            },
        },
        "/api/_grants/{id}/_audit": {
            "parameters": [grant_id],
            "get": {
                "operationId": "app_grant_audit",
                "tags": tag,
                "summary": "The audit rows of a grant request, newest first",
                "responses": responses({"200": {"description": "audit rows", "content": many}}),
            },
        },
        **{f"/api/_grants/{{id}}/{verb}": step(verb) for verb in ("grant", "refuse", "revoke")},
    }
    for consumer, spec in sorted(catalog.apps.items()):
        for service, offer in sorted(catalog.offers.items()):
            asked = offers.consumed(spec, consumer, offer.app, service)
            if offer.app == consumer or asked is None:
                continue
            for action in asked or offer.actions:
                own = paths.get(f"/api/{service}/{action}")
                if own is None or "post" not in own:
                    continue
                post = dict(own["post"])
                post["operationId"] = f"{post['operationId']}_through_{consumer.replace('/', '_')}"
                post["summary"] = f"{post.get('summary', action)}, on behalf of app {consumer}"
                post["responses"] = {
                    **post.get("responses", {}),
                    "403": {"description": f"{granting.GRANT_MISSING}: {offer.app} has not granted it"},
                }
                out[f"/api/_apps/{consumer}/{service}/{action}"] = {**own, "post": post}
    return out
