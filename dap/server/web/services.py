"""``POST /{ws}/api/{module}/{service}/{action}``: the actions of a ``Service`` manifest.

The path has the shape of a record's (``/{module}/{entity}/{id}``), whose other methods the REST
routes answer and whose POST they answer 405. Which one a POST means is decided by what the
catalog declares (:func:`target`, pure): the name of a service exposed over REST in that module
makes it a service action; anything else stays the record path (405 with its ``Allow``). The
config validation refuses an entity and a service of one name in one module, so the two never
compete.

A service action is checked in the order of a record action (``web.moves``): unknown, disabled,
or not exposed over REST → 404; the caller (a token, or none for a ``public: true`` action) and
``required_permission`` → 401/403; what runs it → 501; params → 422; ``rate_limit`` → 429; then
``call: async`` queues a job (202, ``web.jobs``) and a synchronous call runs
``workflows.services`` (200 ``{"result", "event"}``, idempotent replays as for records).
"""

from __future__ import annotations

import uuid
from typing import Literal

from aiohttp import web

from dap.config.enums import CallMode
from dap.server import errors, identity, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog
from dap.server.documents import idempotency
from dap.server.storage import db
from dap.server.web import jobs, requests
from dap.server.workflows import actions, services, sidecars


def target(catalog: Catalog, module: str, name: str) -> Literal["service", "entity"]:
    """Whether ``/{module}/{name}/{x}`` names a service action or a record. Pure."""
    key = f"{module}/{name}"
    if key in catalog.services and key not in catalog.resources:
        return "service"
    return "entity"


def serves(catalog: Catalog, module: str, name: str, action: str) -> bool:
    """Whether service ``module/name`` has ``action`` open over REST (else POST answers 404). Pure."""
    plan = catalog.services[f"{module}/{name}"].actions.get(action)
    declared = plan.declared if plan is not None else None
    return (
        declared is not None and not declared.disabled and (not declared.expose or "rest" in declared.expose)
    )


async def service_action(request: web.Request) -> web.Response:
    """The service action the path names (:func:`target` said it is one)."""
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    catalog = request.app[state.SPEC].current
    module, name, action = (
        request.match_info["module"],
        request.match_info["entity"],
        request.match_info["id"],
    )
    service = catalog.services[f"{module}/{name}"]
    plan = service.actions.get(action)
    declared = plan.declared if plan is not None else None
    if plan is None or declared is None or declared.disabled:
        raise errors.NotFound(f"{service.key} has no action {action!r}", code="SVC.ACTION.NOT_FOUND")
    if declared.expose and "rest" not in declared.expose:
        raise errors.NotFound(
            f"{service.key} does not expose {action!r} over REST", code="SVC.ACTION.NOT_FOUND"
        )
    header = request.headers.get("Authorization")
    if header is None and declared.public:
        principal = guards.anonymous(workspace.slug)
    else:
        principal = await identity.authenticate(
            request.app, auth.bearer_token(header), workspace=workspace.slug, bind=True
        )
    services.permit(catalog, principal, service, plan)
    # 501s before anything is read or counted (sidecar without an app process attached)
    handler = actions.runner(service.key, plan, request.app.get(sidecars.INVOKER))
    body = await requests.read_body(request) if request.body_exists else {}
    params = actions.parse_params(plan, body)
    keyed = None
    if declared.idempotent:
        header_name = declared.idempotency_key.header if declared.idempotency_key else idempotency.HEADER
        key = idempotency.key_of(request.headers, header_name)
        if key is not None:
            keyed = (key, idempotency.fingerprint(principal.sub, request.path_qs, body))
    tenant = workspace.tenant_id
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:
        await actions.limit(
            conn, service.key, plan, tenant=tenant, sub=principal.sub, ip=request.remote or ""
        )
    if declared.call is CallMode.ASYNC:
        return await jobs.start(
            request,
            slug=workspace.slug,
            tenant=tenant,
            target=service.key,
            kind="service",
            declared=declared,
            record_id=None,
            principal=principal,
            keyed=keyed,
        )
    call = services.Call(
        service=service,
        plan=plan,
        tenant=tenant,
        principal=principal,
        params=params,
        call_id=uuid.uuid4(),
        request_id=request.get(state.REQUEST_ID),
        idempotency=keyed,
    )
    async with db.connection(pool) as conn:
        answer = await services.run(conn, call, handler, services.answer)
    return requests.respond(answer)
