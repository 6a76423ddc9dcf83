"""The archive's endpoints (``documents.archive``): archived records are read, listed and deleted
through a path of their own, so that reaching one is always explicit and the entity's own list
never scans them.

- ``POST /{ws}/api/_archive/run`` — move every eligible document of every entity declaring
  ``archive`` (needs ``dap.archive.run``): ``{"data": {"module/entity": moved}}``;
- ``GET /{ws}/api/_archive/{module}/{entity}`` (``limit``, ``offset``) and ``…/{id}`` — read like
  the entity (find's permission, hidden fields, row scope), each record with ``_archive``;
- ``DELETE /{ws}/api/_archive/{module}/{entity}/{id}`` — the entity's delete permission, and 409
  ``SVC.ARCHIVE.LOCKED_FOR_DELETION`` before ``retain_until`` or under a legal hold, for everyone;
- ``POST /{ws}/api/_archive/{module}/{entity}/{id}/hold`` ``{"hold": true|false, "reason"?}`` —
  set or lift a legal hold (needs ``dap.archive.hold``).

A ``DELETE`` of an archived record through the entity's usual path answers the same 409
(``workflows.operations``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.access import guards, periods
from dap.server.catalog import Catalog, Resource
from dap.server.documents import archive
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import filters

RUN = "dap.archive.run"
HOLD = "dap.archive.hold"
PATH = "/{ws}/api/_archive"


def _resource(catalog: Catalog, request: web.Request) -> Resource:
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None or resource.spec.archive is None:
        raise errors.NotFound("no such entity declares an archive", code="SVC.ENTITY.NOT_FOUND")
    return resource


def _permission(catalog: Catalog, roles: tuple[str, ...], permission: str) -> None:
    if not catalog.grants.allows(roles, permission):
        raise errors.Forbidden(f"this needs the permission {permission}", code=guards.FORBIDDEN)


async def run(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    _permission(catalog, principal.roles, RUN)
    moved: dict[str, int] = {}
    async with db.connection(request.app[state.POOL]) as conn:
        for resource in catalog.resources.values():
            name = periods.field_of(resource.spec)
            column = resource.column(name) if name is not None else None
            if resource.spec.archive is None or column is None:
                continue
            moved[resource.key] = await archive.run(
                conn, catalog, resource, workspace.tenant_id, column, principal.username
            )
    return requests.reply({"data": moved})


async def list_archived(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _resource(catalog, request)
    access = guards.check(principal, resource, "list")
    query = request.query
    limit = filters.integer("limit", query.get("limit", "50"), low=1, high=500)
    offset = filters.integer("offset", query.get("offset", "0"), low=0, high=filters.MAX_OFFSET)
    async with db.connection(request.app[state.POOL]) as conn:
        rows = await archive.listed(conn, resource, workspace.tenant_id, limit, offset)
    data = [access.view(archive.view(r)) for r in rows if not access.scope or access.sees(r["record"])]
    return requests.reply({"data": data, "limit": limit, "offset": offset})


async def find_archived(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _resource(catalog, request)
    access = guards.check(principal, resource, "find")
    record_id = requests.parse_record_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        row = await archive.find(conn, resource, workspace.tenant_id, record_id)
    if access.scope and not access.sees(row["record"]):
        raise errors.NotFound(f"no archived {resource.key} {record_id}", code=archive.NOT_FOUND)
    return requests.reply({"data": access.view(archive.view(row))})


async def delete_archived(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _resource(catalog, request)
    access = guards.check(principal, resource, "delete")
    record_id = requests.parse_record_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        row = await archive.find(conn, resource, workspace.tenant_id, record_id)
        if access.scope and not access.sees(row["record"]):
            raise errors.NotFound(f"no archived {resource.key} {record_id}", code=archive.NOT_FOUND)
        await archive.delete(conn, resource, workspace.tenant_id, record_id)
    return web.Response(status=204)


async def hold(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _resource(catalog, request)
    _permission(catalog, principal.roles, HOLD)
    record_id = requests.parse_record_id(request)
    body = await requests.read_json(request)
    on, reason = body.get("hold"), body.get("reason")
    if not isinstance(on, bool) or not (reason is None or (isinstance(reason, str) and len(reason) <= 2000)):
        raise errors.ValidationFailed(
            "hold must be true or false, reason a string",
            errors=[
                errors.FieldProblem("hold", "boolean"),
                errors.FieldProblem("reason", "string, at most 2000"),
            ],
        )
    async with db.connection(request.app[state.POOL]) as conn:
        row = await archive.hold(conn, resource, workspace.tenant_id, record_id, on, reason)
    return requests.reply({"data": guards.check(principal, resource, "find").view(archive.view(row))})


async def _other_method(request: web.Request) -> web.Response:
    raise errors.MethodNotAllowed(f"{request.method} is not a method of this path", allow=["DELETE", "GET"])


def add_routes(app: web.Application) -> None:
    app.router.add_post(PATH + "/run", run)
    app.router.add_get(PATH + "/{module}/{entity}", list_archived, allow_head=False)
    app.router.add_get(PATH + "/{module}/{entity}/{id}", find_archived, allow_head=False)
    app.router.add_delete(PATH + "/{module}/{entity}/{id}", delete_archived)
    # any other method is this path's 405, not a POST …/{id}/{action} of web.moves (registered later)
    app.router.add_route("*", PATH + "/{module}/{entity}/{id}", _other_method)
    app.router.add_post(PATH + "/{module}/{entity}/{id}/hold", hold)


def openapi_paths(catalog: Catalog, responses: Any) -> dict[str, Any]:
    """The archive's paths, for the entities declaring ``archive``."""
    keyed = [r for _, r in sorted(catalog.resources.items()) if r.spec.archive is not None]
    if not keyed:
        return {}
    obj = {"application/json": {"schema": {"type": "object"}}}
    id_param = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
    page = [
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
        {
            "name": "offset",
            "in": "query",
            "schema": {"type": "integer", "minimum": 0, "maximum": filters.MAX_OFFSET},
        },
    ]
    tag = ["Archive"]
    out: dict[str, Any] = {
        "/api/_archive/run": {
            "post": {
                "operationId": "archive_run",
                "tags": tag,
                "summary": "Archive every eligible document (needs dap.archive.run)",
                "responses": responses({"200": {"description": "moved per entity", "content": obj}}, 403),
            }
        }
    }
    for r in keyed:
        base = f"/api/_archive/{r.module}/{r.name}"
        op = f"{r.module}_{r.name}"
        out[base] = {
            "get": {
                "operationId": f"archived_{op}",
                "tags": tag,
                "summary": f"Archived {r.key} records",
                "parameters": page,
                "responses": responses(
                    {"200": {"description": "archived records", "content": obj}}, 400, 403
                ),
            }
        }
        out[base + "/{id}"] = {
            "parameters": [id_param],
            "get": {
                "operationId": f"archived_one_{op}",
                "tags": tag,
                "summary": f"One archived {r.key}",
                "responses": responses({"200": {"description": "the record", "content": obj}}, 403),
            },
            "delete": {
                "operationId": f"delete_archived_{op}",
                "tags": tag,
                "summary": "Delete after retention (409 SVC.ARCHIVE.LOCKED_FOR_DELETION before, or on hold)",
                "responses": responses({"204": {"description": "deleted"}}, 403, 409),
            },
        }
        out[base + "/{id}/hold"] = {
            "parameters": [id_param],
            "post": {
                "operationId": f"hold_archived_{op}",
                "tags": tag,
                "summary": "Set or lift a legal hold (needs dap.archive.hold)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["hold"],
                                "properties": {
                                    "hold": {"type": "boolean"},
                                    "reason": {"type": "string", "maxLength": 2000},
                                },
                            }
                        }
                    },
                },
                "responses": responses({"200": {"description": "held", "content": obj}}, 400, 403, 415, 422),
            },
        }
    return out
