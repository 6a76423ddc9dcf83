"""The approval endpoints: the inbox, one approval, and the votes (``workflows.approvals``).

- ``GET /{ws}/api/_approvals`` — the caller's pending approvals across entities, oldest first
  (``?inbox=module/name`` narrows them to an ``ApprovalInbox``'s entities, ``?entity=module/name``
  to one entity; ``limit``, ``offset``): ``{"data": [approval + "display"], "limit", "offset"}``.
- ``GET /{ws}/api/_approvals/{id}`` — one approval with its votes: for its requester, its voters,
  whoever may vote on its step now, and whoever may find the record (find's permission, row scope).
- ``POST /{ws}/api/_approvals/{id}/approve`` ``{"comment"?}`` and ``…/reject`` ``{"comment"}`` —
  a vote; the answer is ``{"approval": …}`` plus ``"data"`` (the record) when it moved.
- ``GET /{ws}/api/{module}/{entity}/{id}/_approvals`` — the record's approvals, newest first (the
  last 50), read like the record (find's permission, row scope), as ``_audit`` is.

The names start with ``_`` like ``_audit`` and ``_ui``: no module can be called that, so the
routes are added before the entity routes without shadowing any of them. The escalation loop
(``workflows.escalations``) starts and stops with the application here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
from aiohttp import web

from dap.server import errors, state
from dap.server.access import auth, guards
from dap.server.catalog import Resource
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import approvals, approvals_flow, escalations, filters, gates, inbox

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LOOP: web.AppKey[escalations.Loop] = web.AppKey("escalations", escalations.Loop)


def _approval_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        raise errors.NotFound("no such approval", code=approvals.NOT_FOUND) from exc


async def list_mine(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    if guards.is_anonymous(principal):
        raise errors.Unauthorized("the approval inbox needs 'Authorization: Bearer <token>'")
    query = request.query
    entities: list[str] | None = None
    if "inbox" in query:
        module, _, name = query["inbox"].partition("/")
        found = catalog.inboxes.get(f"{module}/{name}") if name else None
        if found is None:
            raise errors.NotFound(
                f"no ApprovalInbox {query['inbox']!r}; name one as module/name",
                code="SVC.APPROVAL.INBOX_NOT_FOUND",
            )
        entities = list(found.entities) or None
    if "entity" in query:
        if query["entity"] not in catalog.resources:
            raise errors.NotFound(
                f"no entity {query['entity']!r}; name one as module/name", code="SVC.ENTITY.NOT_FOUND"
            )
        entities = [e for e in (entities or [query["entity"]]) if e == query["entity"]]
    limit = filters.integer("limit", query.get("limit", str(DEFAULT_LIMIT)), low=1, high=MAX_LIMIT)
    offset = filters.integer("offset", query.get("offset", "0"), low=0, high=filters.MAX_OFFSET)
    async with db.connection(request.app[state.POOL]) as conn:
        data = await inbox.mine(
            conn, catalog, workspace.tenant_id, principal, entities=entities, limit=limit, offset=offset
        )
    return requests.reply({"data": data, "limit": limit, "offset": offset})


async def find_one(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    approval_id = _approval_id(request)
    tenant = workspace.tenant_id
    async with db.connection(request.app[state.POOL]) as conn:
        row = await conn.fetchrow(
            f"SELECT {approvals.COLUMNS} FROM dap.approvals WHERE tenant_id = $1 AND id = $2",
            tenant,
            approval_id,
        )
        if row is None:
            raise errors.NotFound(f"no approval {approval_id} in this workspace", code=approvals.NOT_FOUND)
        votes = await conn.fetch(
            "SELECT step, step_name, principal_sub, username, decision, comment, record_version, at, "
            "voided_at FROM dap.approval_votes WHERE tenant_id = $1 AND approval_id = $2 ORDER BY id",
            tenant,
            approval_id,
        )
        involved = principal.sub == row["requester_sub"] or any(
            v["principal_sub"] == principal.sub for v in votes
        )
        resource = catalog.resources.get(row["entity"])
        if resource is not None and not involved and not _may_vote(resource, row, principal):
            # anyone else reads it as they may read the record: find's permission and row scope
            guards.check(principal, resource, "find")
            await guards.select_record(conn, resource, tenant, row["record_id"], principal=principal)
    data = approvals.view(row)
    data["votes"] = [
        {
            "step": v["step_name"],
            "by": v["username"],
            "decision": v["decision"],
            "comment": v["comment"],
            "record_version": v["record_version"],
            "at": v["at"].isoformat(),
            "void": v["voided_at"] is not None,
        }
        for v in votes
    ]
    return requests.reply({"data": data})


async def of_record(request: web.Request) -> web.Response:
    """``GET /{ws}/api/{module}/{entity}/{id}/_approvals``: a record's approvals, newest first."""
    workspace, principal, catalog = await requests.resolve(request)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None or "find" not in resource.actions:
        raise errors.NotFound("no such entity is exposed over REST with find", code="SVC.ENTITY.NOT_FOUND")
    guards.check(principal, resource, "find")
    record_id = requests.parse_record_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        await guards.select_record(conn, resource, workspace.tenant_id, record_id, principal=principal)
        rows = await conn.fetch(
            f"SELECT {approvals.COLUMNS} FROM dap.approvals WHERE tenant_id = $1 AND entity = $2 "
            "AND record_id = $3 ORDER BY created_at DESC LIMIT $4",
            workspace.tenant_id,
            resource.key,
            record_id,
            DEFAULT_LIMIT,
        )
    return requests.reply({"data": [approvals.view(r) for r in rows]})


def _may_vote(resource: Resource, row: asyncpg.Record, principal: auth.Principal) -> bool:
    """Whether ``principal`` is eligible for the pending step of the approval ``row``."""
    plan = resource.workflow.get(row["action"])
    gate = plan.move.gate if plan is not None and plan.move is not None else None
    if row["status"] != "pending" or gate is None or row["step"] >= len(gate.steps):
        return False
    refused = gates.refusal(
        gate.steps[row["step"]],
        gates.Voter(principal.sub, principal.roles),
        votes=row["votes"],
        escalated=row["escalated_at"] is not None,
        requester="",  # reading: the requester rule is about voting
        self_approval=True,
        allows=resource.grants.allows,
    )
    return refused is None


async def _vote(request: web.Request, *, approve: bool) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    approval_id = _approval_id(request)
    body = await requests.read_body(request) if request.body_exists else {}
    comment = approvals_flow.comment_of(body, required=not approve)
    vote = approvals_flow.Vote(
        catalog=catalog,
        tenant=workspace.tenant_id,
        approval_id=approval_id,
        principal=principal,
        approve=approve,
        comment=comment,
        request_id=request.get(state.REQUEST_ID),
    )
    async with db.connection(request.app[state.POOL]) as conn:
        decided = await approvals_flow.decide(conn, vote)
    if decided.cancelled is not None:
        raise errors.Conflict(
            f"approval {approval_id} was cancelled and your vote not counted: {decided.cancelled}",
            code=approvals.STALE,
        )
    answer: dict[str, object] = {"approval": decided.approval}
    if decided.record is not None and decided.resource is not None:
        request.app[state.CACHE].invalidate(
            (decided.resource.table.name, workspace.tenant_id, uuid.UUID(decided.approval["record_id"]))
        )
        answer["data"] = guards.check(principal, decided.resource, "find").view(decided.record)
    return requests.reply(answer)


async def approve(request: web.Request) -> web.Response:
    return await _vote(request, approve=True)


async def reject(request: web.Request) -> web.Response:
    return await _vote(request, approve=False)


async def _start_loop(app: web.Application) -> None:
    app[LOOP].start()


async def _stop_loop(app: web.Application) -> None:
    await app[LOOP].stop()


def add_routes(app: web.Application) -> None:
    """The routes (before the entity routes) and the escalation loop's start and stop."""
    app.router.add_get("/{ws}/api/_approvals", list_mine, allow_head=False)
    app.router.add_get("/{ws}/api/_approvals/{id}", find_one, allow_head=False)
    app.router.add_post("/{ws}/api/_approvals/{id}/approve", approve)
    app.router.add_post("/{ws}/api/_approvals/{id}/reject", reject)
    app.router.add_get("/{ws}/api/{module}/{entity}/{id}/_approvals", of_record, allow_head=False)
    app[LOOP] = escalations.Loop(app[state.POOL])
    app.on_startup.append(_start_loop)
    app.on_cleanup.insert(0, _stop_loop)  # before the pool closes


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "entity": {"type": "string", "description": "module/name"},
        "record_id": {"type": "string", "format": "uuid"},
        "action": {"type": "string"},
        "transition": {"type": "string"},
        "to": {"type": "string", "description": "the state the record moves to once approved"},
        "status": {"type": "string", "enum": ["pending", "approved", "rejected", "cancelled"]},
        "step": {
            "type": ["object", "null"],
            "description": "the current step (null once decided)",
            "properties": {
                "index": {"type": "integer"},
                "name": {"type": "string"},
                "title": {"type": "string"},
                "approvers": {"type": "integer", "description": "quorum"},
                "votes": {"type": "integer"},
                "roles": {"type": "array", "items": {"type": "string"}},
                "permission": {"type": ["string", "null"]},
                "escalate_at": {"type": ["string", "null"], "format": "date-time"},
                "escalated": {"type": "boolean"},
            },
        },
        "requested_by": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "decided_at": {"type": ["string", "null"], "format": "date-time"},
        "history": {"type": "array", "items": {"type": "object"}},
        "display": {"type": "object", "description": "inbox only: the step's display fields"},
        "votes": {"type": "array", "items": {"type": "object"}, "description": "GET one only"},
    },
}


def openapi_paths(responses: Callable[..., dict[str, Any]], gated: list[str]) -> dict[str, Any]:
    """The OpenAPI paths of the approval endpoints (``responses`` adds the problem answers);
    ``gated``: ``module/name`` of the entities with a gated transition and find."""
    ref = {"$ref": "#/components/schemas/Approval"}
    one = {"application/json": {"schema": {"type": "object", "properties": {"data": ref}}}}
    page = {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "data": {"type": "array", "items": ref},
                    "limit": {"type": "integer"},
                    "offset": {"type": "integer"},
                },
            }
        }
    }
    voted = {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"approval": ref, "data": {"description": "the record, when it moved"}},
            }
        }
    }
    approval_id = {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }
    query = [
        {
            "name": "inbox",
            "in": "query",
            "schema": {"type": "string"},
            "description": "ApprovalInbox module/name",
        },
        {"name": "entity", "in": "query", "schema": {"type": "string"}, "description": "module/name"},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}},
        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    ]
    tag = ["Approvals"]

    def vote(verb: str, required: bool) -> dict[str, Any]:
        body = {"type": "object", "properties": {"comment": {"type": "string"}}}
        if required:
            body["required"] = ["comment"]
        return {
            "parameters": [approval_id],
            "post": {
                "operationId": f"{verb}_approval",
                "tags": tag,
                "summary": f"{verb.capitalize()} the current step of an approval",
                "requestBody": {"required": required, "content": {"application/json": {"schema": body}}},
                "responses": responses(
                    {"200": {"description": "counted", "content": voted}}, 400, 403, 409, 413, 415, 422
                ),
            },
        }

    per_record = {
        f"/api/{key}/{{id}}/_approvals": {
            "parameters": [approval_id],
            "get": {
                "operationId": f"approvals_{key.replace('/', '_')}",
                "tags": tag,
                "summary": f"Approvals of a {key} record, newest first",
                "responses": responses({"200": {"description": "approvals", "content": page}}, 403),
            },
        }
        for key in gated
    }
    return {
        **per_record,
        "/api/_approvals": {
            "get": {
                "operationId": "my_pending_approvals",
                "tags": tag,
                "summary": "My pending approvals across entities (the approval inbox), oldest first",
                "parameters": query,
                "responses": responses({"200": {"description": "a page", "content": page}}, 400),
            }
        },
        "/api/_approvals/{id}": {
            "parameters": [approval_id],
            "get": {
                "operationId": "find_approval",
                "tags": tag,
                "summary": "One approval with its votes",
                "responses": responses({"200": {"description": "the approval", "content": one}}, 403),
            },
        },
        "/api/_approvals/{id}/approve": vote("approve", False),
        "/api/_approvals/{id}/reject": vote("reject", True),
    }
