"""OpenAPI 3.1 of one workspace's REST API, derived from the catalog.

Only what the workspace really serves is described: exposed entities, their opted-in actions,
the list parameters (``field[op]`` for every operator that applies to the field's type), record
and input schemas, and the problem document. Decimal, money and percent travel as exact strings,
so their schema is a string with a decimal pattern. The server URL is the workspace prefix
(``/{slug}``), so paths read ``/api/{module}/{entity}``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dap import __version__
from dap.server import state
from dap.server.access import periods as period_rule
from dap.server.catalog import Catalog, Resource
from dap.server.documents import lifecycle
from dap.server.storage import tables
from dap.server.web import (
    approvals,
    archive,
    grants,
    notifications,
    openapi_files,
    openapi_jobs,
    periods,
    schemas,
)
from dap.server.workflows import actions, filters, sidecars

PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "request_id": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}


def _record_schema(resource: Resource, catalog: Catalog) -> dict[str, Any]:
    schema = schemas.object_schema(tuple(resource.fields.values()), resource.module, catalog, for_input=False)
    props = schema["properties"]
    props["id"] = {"type": "string", "format": "uuid"}
    props["version"] = {"type": "integer"}
    props["created_at"] = {"type": "string", "format": "date-time"}
    props["updated_at"] = {"type": "string", "format": "date-time"}
    props["owner"] = {"type": ["string", "null"]}
    if resource.lifecycle:
        props["docstatus"] = {"type": "string", "enum": list(tables.DOCSTATUS)}
    return schema


SUBMIT_PARAMETER = {
    "name": "submit",
    "in": "query",
    "schema": {"type": "boolean"},
    "description": "true: create and submit in one call",
}
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "schema": {"type": "string", "pattern": '^(\\*|"[0-9]{1,18}")$'},
    "description": 'the version in quotes, e.g. "3"',
}
# One field's change in an audit row: [before, after], each a value of the field (any JSON). The
# pair is typed by `items` (not `prefixItems`): client generators reject an array without `items`
# (openapi-python-client drops the whole response), and 3.1's tuple form is not read by them all.
CHANGE = {
    "type": "array",
    "items": {"description": "the field's value: before (first), after (second)"},
    "minItems": 2,
    "maxItems": 2,
}
TRAIL = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {
                "data": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "format": "uuid"},
                            "action": {"type": "string"},
                            "at": {"type": "string", "format": "date-time"},
                            "actor": {
                                "type": "object",
                                "properties": {"sub": {"type": "string"}, "username": {"type": "string"}},
                            },
                            "version": {"type": ["integer", "null"]},
                            "changes": {
                                "type": "object",
                                "description": "field → [before, after]; an approval's rows "
                                "(action approval.*) hold approval → what happened",
                                "properties": {"approval": {"type": "object"}},
                                "additionalProperties": CHANGE,
                            },
                            "request_id": {"type": ["string", "null"]},
                        },
                    },
                },
                "limit": {"type": "integer"},
                "offset": {"type": "integer"},
            },
        }
    }
}


REFUSED = (414, 431)  # any request: a request line or header field past the limits (web.protocol)


def _responses(ok: dict[str, Any], *errors_: int) -> dict[str, Any]:
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    out = dict(ok)
    for status in (401, 404, *errors_, *REFUSED):
        out[str(status)] = {"description": "problem document", "content": problem}
    return out


def _actions(
    r: Resource, catalog: Catalog, tag: list[str], id_param: dict[str, Any], name: str, bridged: bool
) -> dict[str, Any]:
    """``POST …/{id}/{action}`` of every custom action and transition (``web.moves``) that can run
    here, with its params; one that would answer 501 (sidecar without an app process attached,
    script, an unregistered handler, nothing to run) is left out, as the server does not serve it."""
    out: dict[str, Any] = {}
    for action, plan in sorted(r.workflow.items()):
        declared = plan.declared
        if declared is not None and (
            declared.disabled or (declared.expose and "rest" not in declared.expose)
        ):
            continue
        if not actions.runs_here(r.key, plan, bridged=bridged):
            continue
        params = schemas.object_schema(tuple(plan.params.values()), r.module, catalog, for_input=True)
        answer: dict[str, Any] = {
            "type": "object",
            "properties": {
                "data": {"$ref": f"#/components/schemas/{name}"},
                "result": {"description": "what a native handler answered (null without one)"},
                "transition": {
                    "type": "object",
                    "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                },
                "event": {"type": "string", "format": "uuid", "description": "the emitted event's id"},
            },
        }
        summary = declared.description if declared is not None and declared.description else None
        if plan.move is not None:
            moves = f"moves {', '.join(plan.move.origins)} → {plan.move.to}"
            summary = (
                f"{summary} ({moves})" if summary else f"{action.replace('_', ' ').capitalize()}: {moves}"
            )
        parameters: list[dict[str, Any]] = [IF_MATCH, *openapi_jobs.callback_parameter(declared)]
        if declared is not None and declared.idempotent:
            header = declared.idempotency_key.header if declared.idempotency_key else "Idempotency-Key"
            parameters.append({"name": header, "in": "header", "schema": {"type": "string"}})
        ok = {"200": {"description": "done", "content": {"application/json": {"schema": answer}}}}
        if plan.move is not None and plan.move.gate is not None:  # opens an approval (web.approvals)
            summary = (
                f"{summary or action} — approval gated: answers 202 with the approval, moves once approved"
            )
            answer["properties"]["approval"] = {"$ref": "#/components/schemas/Approval"}
            ok["202"] = {
                "description": "approval opened",
                "content": {"application/json": {"schema": answer}},
            }
        out[f"/api/{r.module}/{r.name}/{{id}}/{action}"] = {
            "parameters": [id_param],
            "post": {
                "operationId": f"{action}_{r.module}_{r.name}",
                "tags": tag,
                "summary": summary or f"{action.replace('_', ' ').capitalize()} {r.title}",
                "parameters": parameters,
                "requestBody": {"required": False, "content": {"application/json": {"schema": params}}},
                "responses": _responses(
                    openapi_jobs.accepted() if openapi_jobs.is_async(declared) else ok,
                    400,
                    403,
                    409,
                    412,
                    413,
                    415,
                    422,
                    429,
                ),
            },
        }
        if openapi_jobs.is_async(declared):
            out.update(openapi_jobs.job_path(r.module, r.name, tag))
    return out


def document(catalog: Catalog, slug: str, *, bridged: bool = False) -> dict[str, Any]:
    """The OpenAPI 3.1 document of workspace ``slug``; ``bridged``: an app process is attached, so
    ``impl.type: sidecar`` actions are served too."""
    paths: dict[str, Any] = {}
    components: dict[str, Any] = {"Problem": PROBLEM, "Job": openapi_jobs.JOB}
    for key in sorted(catalog.resources):
        r = catalog.resources[key]
        name = f"{r.module}.{r.name}"
        components[name] = _record_schema(r, catalog)
        fields = tuple(r.fields.values())
        components[f"{name}.create"] = schemas.object_schema(fields, r.module, catalog, for_input=True)
        components[f"{name}.update"] = schemas.object_schema(
            fields, r.module, catalog, for_input=True, partial=True
        )
        for ns, ext in r.extensions.items():  # namespaced extension data, an object replaced as a whole
            for suffix, for_input in (("", False), (".create", True), (".update", True)):
                ext_schema = schemas.object_schema(ext, r.module, catalog, for_input=for_input)
                components[f"{name}{suffix}"]["properties"][ns] = {"anyOf": [ext_schema, {"type": "null"}]}
        one = {"type": "object", "properties": {"data": {"$ref": f"#/components/schemas/{name}"}}}
        many = {
            "type": "object",
            "properties": {
                "data": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}},
                "limit": {"type": "integer"},
                "offset": {"type": "integer"},
                "total": {"type": ["integer", "null"]},
            },
        }
        json_one = {"application/json": {"schema": one}}
        collection: dict[str, Any] = {}
        item: dict[str, Any] = {}
        tag = [r.title]
        if "list" in r.actions:
            collection["get"] = {
                "operationId": f"list_{r.module}_{r.name}",
                "tags": tag,
                "summary": f"List {r.title}",
                "parameters": schemas.list_parameters(r),
                "responses": _responses(
                    {"200": {"description": "a page", "content": {"application/json": {"schema": many}}}}, 400
                ),
            }
        if "create" in r.actions:
            collection["post"] = {
                "operationId": f"create_{r.module}_{r.name}",
                "tags": tag,
                "summary": f"Create {r.title}",
                **({"parameters": [SUBMIT_PARAMETER]} if lifecycle.move_open(r, lifecycle.SUBMIT) else {}),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{name}.create"}}
                    },
                },
                "responses": _responses(
                    {"201": {"description": "created", "content": json_one}}, 400, 409, 413, 422
                ),
            }
        id_param = {
            "name": "id",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "format": "uuid"},
        }
        if "find" in r.actions:
            item["get"] = {
                "operationId": f"find_{r.module}_{r.name}",
                "tags": tag,
                "summary": f"Find {r.title}",
                "responses": _responses({"200": {"description": "the record", "content": json_one}}),
            }
        if "update" in r.actions:
            item["patch"] = {
                "operationId": f"update_{r.module}_{r.name}",
                "tags": tag,
                "summary": f"Update {r.title}",
                "parameters": [IF_MATCH],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{name}.update"}}
                    },
                },
                "responses": _responses(
                    {"200": {"description": "updated", "content": json_one}}, 400, 409, 412, 413, 422
                ),
            }
        dated = (422,) if period_rule.field_of(r.spec) is not None else ()  # SVC.PERIOD.CLOSED
        if "delete" in r.actions:
            item["delete"] = {
                "operationId": f"delete_{r.module}_{r.name}",
                "tags": tag,
                "summary": f"Delete {r.title}",
                "responses": _responses({"204": {"description": "deleted"}}, 409, *dated),
            }
        if "find" in r.actions:
            paths[f"/api/{r.module}/{r.name}/{{id}}/_audit"] = {
                "parameters": [id_param],
                "get": {
                    "operationId": f"audit_{r.module}_{r.name}",
                    "tags": tag,
                    "summary": f"Audit trail of a {r.title}, newest first",
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                        {
                            "name": "offset",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0, "maximum": filters.MAX_OFFSET},
                        },
                    ],
                    "responses": _responses({"200": {"description": "audit rows", "content": TRAIL}}, 400),
                },
            }
        for move in ("submit", "cancel"):
            if lifecycle.move_open(r, move):
                paths[f"/api/{r.module}/{r.name}/{{id}}/{move}"] = {
                    "parameters": [id_param],
                    "post": {
                        "operationId": f"{move}_{r.module}_{r.name}",
                        "tags": tag,
                        "summary": f"{move.capitalize()} {r.title}",
                        "responses": _responses(
                            {"200": {"description": "moved", "content": json_one}}, 409, 412, *dated
                        ),
                    },
                }
        paths.update(_actions(r, catalog, tag, id_param, name, bridged))
        paths.update(
            openapi_files.paths(r, responses=_responses, if_match=IF_MATCH, id_param=id_param, tag=tag)
        )
        if collection:
            paths[f"/api/{r.module}/{r.name}"] = collection
        if item:
            paths[f"/api/{r.module}/{r.name}/{{id}}"] = {"parameters": [id_param], **item}
    gated = [
        key
        for key, r in sorted(catalog.resources.items())
        if any(p.move is not None and p.move.gate is not None for p in r.workflow.values())
    ]
    if gated:  # the approval endpoints (web.approvals)
        readable = [k for k in gated if "find" in catalog.resources[k].actions]
        paths.update(approvals.openapi_paths(_responses, readable))
        components["Approval"] = approvals.APPROVAL_SCHEMA
    paths.update(archive.openapi_paths(catalog, _responses))  # web.archive, for archive entities
    if periods.applies(catalog):  # the accounting-period endpoints (web.periods)
        paths.update(periods.openapi_paths(_responses))
        components["Period"] = periods.PERIOD_SCHEMA
    paths.update(openapi_jobs.service_paths(catalog, bridged=bridged))
    through = grants.openapi_paths(catalog, paths, _responses)  # apps' grants (issue 47)
    if through:
        paths.update(through)
        components["AppGrant"] = grants.GRANT_SCHEMA
    paths.update(notifications.openapi_paths(_responses))
    components["Notification"] = notifications.NOTIFICATION
    return {
        "openapi": "3.1.0",
        "info": {"title": f"dap workspace {slug}", "version": __version__},
        "servers": [{"url": f"/{slug}"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        },
    }


async def handler(request: web.Request) -> web.Response:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    bridged = sidecars.INVOKER in request.app
    return web.json_response(document(request.app[state.SPEC].current, workspace.slug, bridged=bridged))
