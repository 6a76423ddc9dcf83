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

The same action called through an app, ``POST /{ws}/api/_apps/{app_module}/{app}/{module}/{service}/{action}``
(``web.grants`` routes it here), is made on behalf of that app: after 401/403, a service another
app offers answers 403 ``SVC.APP.GRANT_MISSING`` unless its owner granted the action
(``acting.on_behalf``, ``workflows.granting``).
"""

from __future__ import annotations

from typing import Literal

from aiohttp import web

from dap.config.enums import ProtocolType
from dap.server import identity, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog
from dap.server.web import requests
from dap.server.workflows import acting, callbacks, sidecars


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


def app_of(request: web.Request) -> str | None:
    """The app a call is made through: the ``/_apps/{app_module}/{app}`` prefix of its path, the
    only attribution REST reads (a header naming an app is ignored). Pure."""
    match = request.match_info
    return f"{match['app_module']}/{match['app']}" if "app_module" in match else None


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
    plan = acting.plan_of(service, action, ProtocolType.REST)  # 404: unknown, disabled, not REST's
    declared = plan.declared
    assert declared is not None
    header = request.headers.get("Authorization")
    if header is None and declared.public:
        principal = guards.anonymous(workspace.slug)
    else:
        principal = await identity.authenticate(
            request.app, auth.bearer_token(header), workspace=workspace.slug, bind=True
        )
    # 401/403 (the caller's, the app's grant), then 501s before anything is read or counted
    await acting.admit(request.app[state.POOL], workspace, catalog, principal, service, plan, app_of(request))
    handler = acting.service_handler(catalog, principal, service, plan, request.app.get(sidecars.INVOKER))
    body = await requests.read_body(request) if request.body_exists else {}
    key = request.headers.get(acting.key_header(declared))
    job = acting.is_async(declared)  # the body's text and a callback URL are a job's only
    raw = (await request.read()).decode() if job and request.body_exists else ""
    callback = callbacks.url_of(request.headers, declared.callback) if job else None
    call = acting.ServiceCall(
        request.app[state.POOL], workspace, principal, service, plan, request.get(state.REQUEST_ID)
    )
    answer = await acting.service_action(
        call,
        handler,
        body,
        raw=raw,
        key=key,
        target=request.path_qs,
        ip=request.remote or "",
        queue=acting.Queue(request.app[state.WORKER], callback),
    )
    return requests.respond(answer)
