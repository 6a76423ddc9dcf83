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
``id``, echoed as sent (any JSON value but ``null`` and ``""``, as JSON-RPC's). Calls of one socket
run one at a time, in the order sent.

Actions (``workflows.acting``, as REST's): a custom action or transition is its name as the
``verb`` with ``record``, ``body`` (its params), ``version``, ``idempotency_key`` and, for a job,
``callback_url``; a ``Service``'s action is ``{"service": "module/name", "verb": action, "body"}``,
with ``"app": "module/name"`` when it is made through an app (its grant is checked, issue 47).
Their result frame is REST's JSON answer plus its ``status`` (200; 202 with ``data`` the job and
``location`` its REST address for ``call: async``, or a gated transition). ``{"verb": "_job",
"entity"|"service": key, "job": id}`` reads a job (its caller's only). An action whose own
``expose`` leaves out ``ws`` answers ``SVC.ACTION.NOT_FOUND``; a service without a ``ws`` entry
``SVC.ENTITY.NOT_FOUND``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from dap import tracing
from dap.config.enums import ProtocolType
from dap.server import errors, fieldvalues, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog
from dap.server.documents import idempotency, lifecycle
from dap.server.events import builtin
from dap.server.storage.workspaces import Workspace
from dap.server.web import requests, sagas
from dap.server.workflows import acting, operations, saga_decisions, sidecars

VERBS = frozenset({"list", "find", "create", "update", "delete"})
JOB = "_job"  # the verb of a job lookup (no action is named so: names start with a letter)
SAGA = "_saga"  # a saga of a service: read it; ``_saga_retry|skip|resolve``: a person's decision


def _body(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame's ``body`` (a record's fields, an action's params) with exact numbers."""
    body = frame.get("body") or {}
    if not isinstance(body, dict):
        raise errors.BadRequest("body must be a JSON object", code="SVC.REQUEST.MALFORMED_JSON")
    exact: dict[str, Any] = fieldvalues.exact_json(json.dumps(body))  # as REST reads
    return exact


def _sent(frame: dict[str, Any], name: str) -> str | None:
    """A text the frame sends (an idempotency key, a callback URL), ``None`` without one."""
    value = frame.get(name)
    return None if value is None else str(value)


def _answered(answer: idempotency.Answer) -> dict[str, Any]:
    """An action's answer as a result frame's fields: REST's JSON body, its ``status`` (200, or 202
    for a job or a gated transition) and, for a job, its REST ``location``."""
    out: dict[str, Any] = {**json.loads(answer.body), "status": answer.status}
    if "Location" in answer.headers:
        out["location"] = answer.headers["Location"]
    return out


async def _job(
    request: web.Request, workspace: Workspace, key: str, frame: dict[str, Any], principal: auth.Principal
) -> dict[str, Any]:
    return await acting.find_job(
        request.app[state.POOL], workspace.tenant_id, key, str(frame.get("job", "")), principal.sub
    )


async def _saga(
    request: web.Request,
    workspace: Workspace,
    catalog: Catalog,
    key: str,
    frame: dict[str, Any],
    principal: auth.Principal,
    verb: str,
) -> dict[str, Any]:
    """``_saga`` reads a saga of service ``key`` (``"saga": id``); ``_saga_retry|skip|resolve``
    (with ``body``) is REST's ``POST /{ws}/api/_sagas/{id}/{op}``."""
    pool, raw = request.app[state.POOL], str(frame.get("saga", ""))
    if verb == SAGA:
        return await saga_decisions.find(pool, catalog, workspace.tenant_id, principal, raw, key)
    op = verb[len(SAGA) + 1 :]
    data = await saga_decisions.settle(
        pool,
        catalog,
        workspace.tenant_id,
        principal,
        raw,
        op,
        _body(frame),
        request.get(state.REQUEST_ID),
        key,
    )
    request.app[sagas.ENGINE].wake()
    return data


async def _service(
    request: web.Request,
    workspace: Workspace,
    catalog: Catalog,
    frame: dict[str, Any],
    principal: auth.Principal,
    verb: str,
) -> dict[str, Any]:
    """A service action (``"service": "module/name"``, ``"verb"``: the action) or its job."""
    key = str(frame.get("service", ""))
    service = catalog.ws_services.get(key)
    if service is None:
        raise errors.NotFound(f"no service {key} is exposed over ws", code="SVC.ENTITY.NOT_FOUND")
    if verb == JOB:
        return {"data": await _job(request, workspace, key, frame, principal)}
    if verb == SAGA or verb.startswith(SAGA + "_"):
        return {"data": await _saga(request, workspace, catalog, key, frame, principal, verb)}
    plan = acting.plan_of(service, verb, ProtocolType.WS)
    app = request.app
    through = frame.get("app")  # the app the call is made through (``acting.on_behalf``)
    named = str(through) if through is not None else None
    await acting.admit(app[state.POOL], workspace, catalog, principal, service, plan, named)
    handler = acting.service_handler(catalog, principal, service, plan, app.get(sidecars.INVOKER))
    body = _body(frame)
    call = acting.ServiceCall(
        app[state.POOL], workspace, principal, service, plan, request.get(state.REQUEST_ID)
    )
    answer = await acting.service_action(
        call,
        handler,
        body,
        raw=acting.json_text(body),
        key=_sent(frame, "idempotency_key"),
        target=f"/{workspace.slug}/api/{service.key}/{verb}",
        ip=request.remote or "",
        queue=acting.Queue(app[state.WORKER], _sent(frame, "callback_url")),
    )
    return _answered(answer)


async def answer(
    request: web.Request, ws: web.WebSocketResponse, frame: dict[str, Any], principal: auth.Principal
) -> None:
    """Run one ``call`` frame and send its ``result`` or ``error`` frame, with the frame's ``id``
    as it was sent: any JSON value, as JSON-RPC's id, so a client correlates by its own value."""
    cid = frame.get("id")
    if not tracing.enabled():
        await _answer(request, ws, frame, principal, cid, None)
        return
    # a span per call, continuing the frame's "traceparent" when it has one (else a new trace)
    parent = frame.get("traceparent") if isinstance(frame.get("traceparent"), str) else None
    method = (
        f"{frame.get('entity') or frame.get('service') or frame.get('job') or ''}/{frame.get('verb') or ''}"
    )
    attributes = {"rpc.system": "dap.ws", "rpc.method": method}
    with tracing.span(f"ws call {method}", kind="server", parent=parent, attributes=attributes) as span:
        await _answer(request, ws, frame, principal, cid, span)


async def _answer(
    request: web.Request,
    ws: web.WebSocketResponse,
    frame: dict[str, Any],
    principal: auth.Principal,
    cid: Any,
    span: Any,
) -> None:
    try:
        reply = await _run(request, frame, principal)
    except errors.ApiError as exc:
        tracing.annotate(span, **{"dap.error_code": exc.code})
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
    if frame.get("id") is None or frame["id"] == "":
        raise errors.BadRequest(
            'a call needs an id to answer by (any JSON value but null and ""): add "id" to the frame',
            code="SVC.WS.FRAME",
        )
    app = request.app
    workspace = await app[state.REGISTRY].resolve(request.match_info["ws"])
    catalog = app[state.SPEC].current
    verb = str(frame.get("verb", ""))
    if "service" in frame:
        return await _service(request, workspace, catalog, frame, principal, verb)
    key = str(frame.get("entity", ""))
    resource = catalog.ws.get(key)
    if resource is None:
        raise errors.NotFound(f"no entity {key} is exposed over ws", code="SVC.ENTITY.NOT_FOUND")
    if verb == JOB:
        return {"data": await _job(request, workspace, key, frame, principal)}
    move = verb in lifecycle.MOVES and resource.lifecycle and lifecycle.move_open(resource, verb)
    custom = verb not in VERBS and not (verb in lifecycle.MOVES and resource.lifecycle)
    plan = resource.workflow.get(verb) if custom else None
    if verb not in resource.actions and not move and plan is None:
        raise errors.NotFound(f"{key} does not expose {verb} over ws", code="SVC.ACTION.NOT_EXPOSED")
    call = requests.call(request, workspace, principal, catalog, resource)
    body = _body(frame)
    version = frame.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise errors.BadRequest("version is the record's version, an integer", code="SVC.REQUEST.IF_MATCH")
    record = str(frame.get("record", ""))
    if plan is not None:  # a custom action or transition, as REST's POST …/{id}/{action}
        access = guards.check(principal, resource, verb)  # required_permission (403)
        declared = plan.declared
        if declared is not None and declared.disabled:
            raise errors.NotFound(f"{key} has disabled {verb!r}", code="SVC.ACTION.NOT_FOUND")
        handler = acting.prepare(resource, plan, ProtocolType.WS, app.get(sidecars.INVOKER))
        record_id = operations.parse_id(record)
        acted = await acting.record_action(
            call,
            access,
            plan,
            handler,
            record_id,
            body,
            raw=acting.json_text(body),
            expected=version,
            key=_sent(frame, "idempotency_key"),
            target=f"{call.location(record_id)}/{verb}",
            ip=request.remote or "",
            queue=acting.Queue(app[state.WORKER], _sent(frame, "callback_url")),
        )
        if declared is not None and declared.emits and acted.event is not None:
            await operations.settle(app[state.EVENTS].feed, resource, declared.emits, acted.event)
        return _answered(acted.answer)
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
