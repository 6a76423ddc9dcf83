"""Request/response calls over the ``/{ws}/_ws`` socket: the entity verbs as frames, by ``id``.

A third adapter over ``workflows.operations`` (with REST and gRPC), for entities whose ``expose``
has ``ws`` (``Catalog.ws``, with the verbs that entry opens); others are refused with
``SVC.ENTITY.NOT_FOUND`` / ``SVC.ACTION.NOT_EXPOSED``. The caller is the socket's (its token,
verified at connect). Client frame::

    {"type": "call", "id": "c1", "entity": "sales/order",
     "verb": "list|find|create|update|delete|submit|cancel", "record": "<uuid>"?,
     "body": {…}?, "query": "a=b&limit=5"?, "version": 3?, "submit": true?, "idempotency_key": "…"?}

answered by ``{"type": "result", "id": "c1", "data": …}`` (a list adds ``limit``, ``offset``,
``total``; a create, update or move adds ``version``) or ``{"type": "error", "id": "c1", "status":
404, "code": "SVC.…", "detail": "…", "errors": […]}`` -- REST's status and problem, correlated by
``id``. Calls of one socket run one at a time, in the order sent.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from dap.server import errors, state
from dap.server.access import auth, guards
from dap.server.documents import idempotency, lifecycle
from dap.server.events import builtin
from dap.server.workflows import operations

VERBS = frozenset({"list", "find", "create", "update", "delete"})


async def answer(
    request: web.Request, ws: web.WebSocketResponse, frame: dict[str, Any], principal: auth.Principal
) -> None:
    """Run one ``call`` frame and send its ``result`` or ``error`` frame."""
    cid = str(frame.get("id", ""))
    try:
        reply = await _run(request, frame, principal)
    except errors.ApiError as exc:
        problem = exc.problem()
        await ws.send_json(
            {
                "type": "error",
                "id": cid,
                "status": exc.status,
                "code": exc.code,
                "detail": exc.detail,
                "errors": problem["errors"],
            }
        )
        return
    await ws.send_str(operations.encode({"type": "result", "id": cid, **reply}).decode())


async def _run(request: web.Request, frame: dict[str, Any], principal: auth.Principal) -> dict[str, Any]:
    if not frame.get("id"):
        raise errors.BadRequest("a call needs an id to answer by", code="SVC.WS.FRAME")
    app = request.app
    workspace = await app[state.REGISTRY].resolve(request.match_info["ws"])
    catalog = app[state.SPEC].current
    key, verb = str(frame.get("entity", "")), str(frame.get("verb", ""))
    resource = catalog.ws.get(key)
    if resource is None:
        raise errors.NotFound(f"no entity {key} is exposed over ws", code="SVC.ENTITY.NOT_FOUND")
    move = verb in lifecycle.MOVES and resource.lifecycle and lifecycle.move_open(resource, verb)
    if verb not in resource.actions and not move:
        raise errors.NotFound(f"{key} does not expose {verb} over ws", code="SVC.ACTION.NOT_EXPOSED")
    call = operations.Call(
        app[state.POOL],
        app[state.CACHE],
        workspace,
        principal,
        catalog,
        resource,
        request.get(state.REQUEST_ID),
        app[state.EVENTS].local_wake(),
    )
    body = frame.get("body") or {}
    if not isinstance(body, dict):
        raise errors.BadRequest("body must be a JSON object", code="SVC.REQUEST.MALFORMED_JSON")
    body = json.loads(json.dumps(body), parse_float=Decimal)  # exact numbers, as REST reads
    version = frame.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise errors.BadRequest("version is the record's version, an integer", code="SVC.REQUEST.IF_MATCH")
    record = str(frame.get("record", ""))
    feed = app[state.EVENTS].feed
    if verb == "list":
        page = await operations.list_records(
            call, parse_qsl(str(frame.get("query", "")), keep_blank_values=True)
        )
        return {"data": page.data, "limit": page.limit, "offset": page.offset, "total": page.total}
    if verb == "find":
        found = await operations.find(call, record)
        return {"data": json.loads(found.body)["data"]}
    if verb == "create":
        key_ = frame.get("idempotency_key")
        key_ = idempotency.key_of({"k": key_}, "k") if key_ is not None else None
        submit = lifecycle.create_submits(resource, {"submit": "true"} if frame.get("submit") else {}, body)
        target = call.location("").rstrip("/") + ("?submit=true" if submit else "")
        stored = await operations.create(call, body, submit=submit, key=key_, target=target)
        if not stored.replayed:
            await operations.settle(feed, resource, "created", stored.event)
        data = json.loads(stored.answer.body)["data"]
        return {"data": data, "version": data.get("version")}
    if verb == "update":
        guards.check(principal, resource, "update")
        updated = await operations.update(call, record, body, expected=version)
        await operations.settle(feed, resource, "updated", updated.event)
        return {"data": updated.data, "version": updated.version}
    if verb == "delete":
        event = await operations.delete(call, record, app.get(state.FILES))
        await operations.settle(feed, resource, "deleted", event)
        return {"data": None}
    access = guards.check(principal, resource, verb)  # submit / cancel
    moved = await operations.move(call, access, verb, record, expected=version)
    await operations.settle(feed, resource, builtin.NAMES[verb], moved.event)
    return {"data": moved.data, "version": moved.version}
