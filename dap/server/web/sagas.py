"""Sagas over HTTP: the process's engine, the operators' inbox and a person's decisions.

``GET /{ws}/api/_sagas`` lists the parked sagas (``?state=`` any saga state) whose resolve
permission the caller holds: the operators' inbox of ``SVC.SAGA.OUTCOME_UNKNOWN`` and
``SVC.SAGA.COMPENSATION_FAILED``. ``GET /{ws}/api/_sagas/{id}`` shows one saga with its timeline
(to its requester and whoever may resolve it; 404 to anyone else). ``POST /{ws}/api/_sagas/{id}/
retry|skip|resolve`` sends a parked saga on (``workflows.saga_decisions.decide``: 403 without the
permission, 409 ``SVC.SAGA.NOT_PARKED`` when it is not parked, 422 without a reason), audited.
The engine itself (``workflows.sagas.Engine``) starts and stops with the app, beside the job
worker; a saga's request hands it the saga (``acting.enqueue``, through the worker's ``sagas``).
"""

from __future__ import annotations

from aiohttp import web

from dap.server import errors, options, state
from dap.server.access import guards
from dap.server.web import requests
from dap.server.workflows import filters, saga_decisions, sagas, sidecars

ENGINE: web.AppKey[sagas.Engine] = web.AppKey("saga_engine", sagas.Engine)
MAX_LIMIT = saga_decisions.MAX_LIMIT


async def list_parked(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    if guards.is_anonymous(principal):
        raise errors.Unauthorized("the saga inbox needs 'Authorization: Bearer <token>'")
    limit = filters.integer("limit", request.query.get("limit", "100"), low=1, high=MAX_LIMIT)
    offset = filters.integer("offset", request.query.get("offset", "0"), low=0, high=filters.MAX_OFFSET)
    pool, wanted = request.app[state.POOL], request.query.get("state")
    data = await saga_decisions.inbox(pool, catalog, workspace.tenant_id, principal, wanted, limit, offset)
    return requests.reply({"data": data, "limit": limit, "offset": offset})


async def find_one(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    pool = request.app[state.POOL]
    data = await saga_decisions.find(pool, catalog, workspace.tenant_id, principal, request.match_info["id"])
    return requests.reply({"data": data})


async def decide(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    body = await requests.read_body(request) if request.body_exists else {}
    data = await saga_decisions.settle(
        request.app[state.POOL],
        catalog,
        workspace.tenant_id,
        principal,
        request.match_info["id"],
        request.match_info["op"],
        body,
        request.get(state.REQUEST_ID),
    )
    request.app[ENGINE].wake()
    return requests.reply({"data": data})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/_sagas", list_parked, allow_head=False)
    app.router.add_get("/{ws}/api/_sagas/{id}", find_one, allow_head=False)
    app.router.add_post("/{ws}/api/_sagas/{id}/{op}", decide)


def attach(app: web.Application, opts: options.ServeOptions) -> None:
    """The process's saga engine: started after the job worker (which hands it sagas), stopped with it."""
    holder = app[state.SPEC]
    engine = app[ENGINE] = sagas.Engine(
        opts.dsn,
        lambda: holder.current,
        lease=opts.job_lease,
        invoker=lambda: app.get(sidecars.INVOKER),
    )
    app[state.WORKER].saga_wake = engine.wake
    app[state.WORKER].sagas = engine  # a saga's request creates it held here (``acting.enqueue``)

    async def start(app: web.Application) -> None:
        await app[ENGINE].start()

    async def stop(app: web.Application) -> None:
        await app[ENGINE].stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
