"""Tracked async jobs over HTTP: the 202 of a ``call: async`` action and ``GET …/_jobs/{id}``.

:func:`start` is the asynchronous end of a record or service action once the request's checks
passed: the callback URL (when the action declares ``callback`` and the request names one) is
checked (422 ``SVC.JOB.CALLBACK_REFUSED``), the job is inserted (``workflows.jobs``) in the
transaction that stores the ``Idempotency-Key``'s answer, this process's worker is woken, and the
answer is **202** ``{"data": job}`` with ``Location: /{ws}/api/{module}/{name}/_jobs/{id}``.

``GET /{ws}/api/{module}/{name}/_jobs/{id}`` shows a job to the caller who started it (same
``sub``; a job started anonymously through a ``public`` action to whoever holds its id): 404 for
anyone else, as for an id that does not exist.
"""

from __future__ import annotations

import uuid

from aiohttp import web

from dap.config.actions import Action
from dap.server import errors, identity, options, state
from dap.server.access import auth
from dap.server.documents import idempotency
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import callbacks, jobs, sidecars, worker

WORKER: web.AppKey[worker.Worker] = web.AppKey("job_worker", worker.Worker)
NOT_FOUND = "SVC.JOB.NOT_FOUND"


def path_of(slug: str, target: str, job_id: uuid.UUID) -> str:
    return f"/{slug}/api/{target}/_jobs/{job_id}"


async def start(
    request: web.Request,
    *,
    slug: str,
    tenant: uuid.UUID,
    target: str,
    kind: str,
    declared: Action,
    record_id: uuid.UUID | None,
    principal: auth.Principal,
    keyed: tuple[str, bytes] | None,
) -> web.Response:
    """Queue the action as a job; 202 with it (or the stored answer of a repeated key)."""
    opts = request.app[state.OPTIONS]
    url = callbacks.url_of(request.headers, declared.callback)
    decl = declared.callback
    if url is not None and decl is not None:
        await callbacks.check(url, request.app[WORKER].allow)
        if decl.sign and opts.callback_secret is None:
            raise errors.NotImplementedHere(
                f"{target}/{declared.name} signs its callbacks and this server has no --callback-secret",
                code="SVC.JOB.CALLBACK_NOT_SIGNED",
            )
    raw = await request.read() if request.body_exists else b""
    new = jobs.New(
        id=uuid.uuid4(),
        tenant=tenant,
        target=target,
        kind=kind,
        action=declared.name,
        record_id=record_id,
        principal=worker.principal_json(principal),
        body=raw.decode() or "{}",
        expected=requests.if_match(request),
        request_id=request.get(state.REQUEST_ID),
        callback_url=url,
        callback_sign=bool(decl is not None and decl.sign),
        callback_retry=decl.retry.model_dump() if decl is not None and decl.retry is not None else None,
    )
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        stored = await idempotency.claim(conn, tenant, *keyed) if keyed is not None else None
        if stored is None:
            job = await jobs.enqueue(conn, new)
            stored = idempotency.Answer(
                202, requests.dumps({"data": job.view()}), {"Location": path_of(slug, target, job.id)}
            )
            if keyed is not None:
                await idempotency.store(conn, tenant, *keyed, stored)
    request.app[WORKER].wake()
    return requests.respond(stored)


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
    missing = errors.NotFound("no such job", code=NOT_FOUND)
    try:
        job_id = uuid.UUID(request.match_info["job"])
    except ValueError as exc:
        raise missing from exc
    async with db.connection(request.app[state.POOL]) as conn:
        job = await jobs.find(conn, workspace.tenant_id, job_id)
    if job is None or job.row["target"] != target:
        raise missing
    owner = job.principal.get("sub", "")
    if owner and owner != sub:
        raise missing
    return requests.reply({"data": job.view()})


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
