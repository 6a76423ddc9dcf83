"""Tracked async jobs over HTTP: the process's worker and ``GET …/_jobs/{id}``.

The 202 of a ``call: async`` action is ``workflows.acting.enqueue`` (every protocol's): the
callback URL (when the action declares ``callback`` and the request names one) is checked (422
``SVC.JOB.CALLBACK_REFUSED``), the job is inserted (``workflows.jobs``) in the transaction that
stores the ``Idempotency-Key``'s answer, this process's worker (:data:`WORKER`) is woken, and the
answer is **202** ``{"data": job}`` with ``Location: /{ws}/api/{module}/{name}/_jobs/{id}``.

``GET /{ws}/api/{module}/{name}/_jobs/{id}`` shows a job to the caller who started it (same
``sub``; a job started anonymously through a ``public`` action to whoever holds its id): 404 for
anyone else, as for an id that does not exist.
"""

from __future__ import annotations

from aiohttp import web

from dap.server import identity, options, state
from dap.server.access import auth
from dap.server.web import requests
from dap.server.workflows import acting, callbacks, sidecars, worker

WORKER = state.WORKER
NOT_FOUND = acting.JOB_NOT_FOUND


async def find_job(request: web.Request) -> web.Response:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    header = request.headers.get("Authorization")
    sub = ""
    if header is not None:
        sub = (
            await identity.authenticate(request.app, auth.bearer_token(header), workspace=workspace.slug)
        ).sub
    target = f"{request.match_info['module']}/{request.match_info['name']}"
    view = await acting.find_job(
        request.app[state.POOL], workspace.tenant_id, target, request.match_info["job"], sub
    )
    return requests.reply({"data": view})


def attach(app: web.Application, opts: options.ServeOptions) -> None:
    """The process's job worker: started with the app, stopped before its pool closes."""
    holder = app[state.SPEC]
    app[WORKER] = worker.Worker(
        opts.dsn,
        lambda: holder.current,
        lease=opts.job_lease,
        allow=callbacks.parse_networks(opts.callback_allow),
        secret=opts.callback_secret,
        invoker=lambda: app.get(sidecars.INVOKER),  # the bridge, when one is attached
    )

    async def start_worker(app: web.Application) -> None:
        await app[WORKER].start()

    async def stop_worker(app: web.Application) -> None:
        await app[WORKER].stop()

    app.on_startup.append(start_worker)
    app.on_cleanup.append(stop_worker)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/{module}/{name}/_jobs/{job}", find_job, allow_head=False)
