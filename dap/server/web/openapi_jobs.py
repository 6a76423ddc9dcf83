"""The OpenAPI parts of service actions and tracked jobs (``web.openapi`` assembles the document).

- ``POST /api/{module}/{service}/{action}`` of every service action that can run here (one that
  would answer 501, is disabled or not exposed over REST is left out), its params as the body;
  ``security`` is empty-or-bearer for a ``public`` action; 200 ``{"result", "event"}`` or, for
  ``call: async``, 202 with the ``Job`` and its ``Location`` (and the callback header as a
  parameter when the action declares ``callback``).
- ``GET /api/{module}/{name}/_jobs/{job}`` wherever an action is ``call: async``.
"""

from __future__ import annotations

from typing import Any

from dap.config.actions import Action
from dap.config.enums import CallMode
from dap.server.catalog import Catalog, machines
from dap.server.web import schemas
from dap.server.workflows import actions, callbacks

JOB: dict[str, Any] = {
    "type": "object",
    "required": ["id", "state", "progress"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "state": {"type": "string", "enum": ["queued", "running", "succeeded", "failed"]},
        "progress": {"type": "number", "minimum": 0, "maximum": 100, "description": "only goes up"},
        "action": {"type": "string"},
        "target": {"type": "string", "description": "module/name of the entity or service"},
        "record_id": {"type": ["string", "null"], "format": "uuid"},
        "created_at": {"type": "string", "format": "date-time"},
        "started_at": {"type": ["string", "null"], "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "runs": {"type": "integer", "description": "claims by a worker (more than 1 after a lost worker)"},
        "result": {"description": "the answer the synchronous call would have given (succeeded)"},
        "error": {"$ref": "#/components/schemas/Problem"},
        "callback": {
            "type": "object",
            "properties": {
                "state": {"type": "string", "enum": ["waiting", "pending", "delivered", "failed"]},
                "attempts": {"type": "integer"},
                "error": {"type": ["string", "null"]},
            },
        },
    },
}
_PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
_ONE_JOB = {"type": "object", "properties": {"data": {"$ref": "#/components/schemas/Job"}}}


def is_async(declared: Action | None) -> bool:
    return declared is not None and declared.call is CallMode.ASYNC


def accepted() -> dict[str, Any]:
    """The 202 of a ``call: async`` action."""
    return {
        "202": {
            "description": "queued as a job; poll the Location or wait for the callback",
            "headers": {"Location": {"schema": {"type": "string"}}},
            "content": {"application/json": {"schema": _ONE_JOB}},
        }
    }


def callback_parameter(declared: Action | None) -> list[dict[str, Any]]:
    if declared is None or declared.callback is None:
        return []
    return [
        {
            "name": callbacks.header_of(declared.callback),
            "in": "header",
            "description": "URL that receives the finished job (Standard Webhooks"
            + (", signed)" if declared.callback.sign else ")"),
            "schema": {"type": "string", "format": "uri"},
        }
    ]


def job_path(module: str, name: str, tag: list[str]) -> dict[str, Any]:
    return {
        f"/api/{module}/{name}/_jobs/{{job}}": {
            "parameters": [{"name": "job", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {
                "operationId": f"job_{module}_{name}",
                "tags": tag,
                "summary": "A job started by an async action (only its caller sees it)",
                "responses": {
                    "200": {"description": "the job", "content": {"application/json": {"schema": _ONE_JOB}}},
                    **{
                        str(s): {"description": "problem document", "content": _PROBLEM}
                        for s in (401, 404, 414, 431)
                    },
                },
            },
        }
    }


def _runnable(key: str, plan: machines.ActionPlan, bridged: bool) -> bool:
    declared = plan.declared
    if declared is None or declared.disabled or (declared.expose and "rest" not in declared.expose):
        return False
    return actions.runs_here(key, plan, bridged=bridged)


def service_paths(catalog: Catalog, *, bridged: bool = False) -> dict[str, Any]:
    """Every runnable service action (sidecar ones when ``bridged``), and the job path of services
    with async ones."""
    out: dict[str, Any] = {}
    for key in sorted(catalog.services):
        service = catalog.services[key]
        tag = [service.title]
        queued = False
        for name, plan in sorted(service.actions.items()):
            if not _runnable(key, plan, bridged):
                continue
            declared = plan.declared
            assert declared is not None
            body = schemas.object_schema(tuple(plan.params.values()), service.module, catalog, for_input=True)
            parameters = callback_parameter(declared)
            if declared.idempotent:
                header = declared.idempotency_key.header if declared.idempotency_key else "Idempotency-Key"
                parameters.append({"name": header, "in": "header", "schema": {"type": "string"}})
            answer = {
                "type": "object",
                "properties": {
                    "result": {"description": "what the native handler answered"},
                    "event": {"type": "string", "format": "uuid", "description": "the emitted event's id"},
                },
            }
            ok = (
                accepted()
                if is_async(declared)
                else {"200": {"description": "done", "content": {"application/json": {"schema": answer}}}}
            )
            queued = queued or is_async(declared)
            operation: dict[str, Any] = {
                "operationId": f"{name}_{service.module}_{service.name}",
                "tags": tag,
                "summary": declared.description or f"{name.replace('_', ' ').capitalize()} ({service.title})",
                "parameters": parameters,
                "requestBody": {"required": False, "content": {"application/json": {"schema": body}}},
                "responses": {
                    **ok,
                    **{
                        str(s): {"description": "problem document", "content": _PROBLEM}
                        for s in (400, 401, 403, 404, 409, 413, 414, 415, 422, 429, 431)
                    },
                },
            }
            if declared.public:
                operation["security"] = [{}, {"bearer": []}]  # anonymous callers too
            out[f"/api/{service.module}/{service.name}/{name}"] = {"post": operation}
        if queued:
            out.update(job_path(service.module, service.name, tag))
    return out
