"""The job worker of one server process: runs ``dap.jobs`` rows and delivers their callbacks.

:class:`Worker` runs :data:`SLOTS` loops. Each step first fails the jobs whose lease ran out too
often (``jobs.expire``), then claims one job (``FOR UPDATE SKIP LOCKED``, so processes never take
the same row) and runs it (:meth:`Worker.run`); with no job due it delivers one due callback;
with nothing to do it sleeps ``poll`` seconds or until this process enqueues a job
(:meth:`Worker.wake`). The worker has a pool of its own (three connections per slot and one to
claim with), so jobs and requests never wait for each other's connections. While a job runs a
heartbeat extends its lease every third of it on another connection; the action and
``jobs.succeed`` commit in one transaction (see ``jobs``).

:func:`execute` runs one job's action the way the synchronous call would have, with the caller
kept in the row: the permission is checked again (roles are the caller's at request time), and a
spec swapped since then is the one that runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from dap import tracing
from dap.config.actions import RetryDecl
from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, idempotency, reading
from dap.server.storage import db
from dap.server.workflows import actions, callbacks, handlers, jobs, sagas, services, sidecars

log = logging.getLogger(__name__)
SLOTS = 2  # jobs one process runs at once
POLL = 0.25  # seconds between looks at the table when idle
SWEEP = 1.0  # seconds between two looks for jobs to fail (``jobs.expire``)


def _dumps(data: Any) -> str:
    return json.dumps(data, default=db.json_default, separators=(",", ":"))


def record_answer(access: guards.Access, resource: Resource, outcome: actions.Outcome) -> idempotency.Answer:
    """A record action's answer: ``{"data", "result"}`` and ``transition`` / ``event`` when there are."""
    data: dict[str, object] = {
        "data": access.view(reading.present(resource, outcome.row, outcome.children)),
        "result": outcome.result,
    }
    if outcome.moved is not None:
        data["transition"] = {"from": outcome.moved[0], "to": outcome.moved[1]}
    if outcome.event is not None:
        data["event"] = str(outcome.event)
    return idempotency.Answer(200, _dumps(data), {"ETag": f'"{outcome.row["version"]}"'})


def principal_of(stored: dict[str, Any]) -> auth.Principal:
    return auth.Principal(
        sub=stored.get("sub", ""),
        username=stored.get("username", ""),
        roles=tuple(stored.get("roles", ())),
        workspace=stored.get("workspace"),
        attrs=dict(stored.get("attrs", {})),
    )


def principal_json(principal: auth.Principal) -> dict[str, Any]:
    return {
        "sub": principal.sub,
        "username": principal.username,
        "roles": list(principal.roles),
        "workspace": principal.workspace,
        "attrs": principal.attrs,
    }


def _gone(job: jobs.Job) -> errors.NotFound:
    return errors.NotFound(
        f"{job.row['target']} no longer declares the action {job.row['action']!r} (the spec changed)",
        code="SVC.ACTION.NOT_FOUND",
    )


async def execute(
    conn: db.Connection,
    catalog: Catalog,
    job: jobs.Job,
    report: handlers.Report,
    invoker: sidecars.Invoker | None = None,
) -> Any:
    """Run the job's action on ``conn`` (inside the caller's transaction); its answer as JSON.
    ``invoker``: the process's app process, for ``impl.type: sidecar`` (501 without one)."""
    row = job.row
    principal = principal_of(job.principal)
    body = jobs.decode(row["body"])
    tenant: uuid.UUID = row["tenant_id"]
    if row["kind"] == "entity":
        resource = catalog.any_resource(row["target"])
        plan = resource.workflow.get(row["action"]) if resource is not None else None
        if resource is None or plan is None:
            raise _gone(job)
        access = guards.check(principal, resource, plan.name)
        handler = actions.runner(resource.key, plan, invoker)
        call = actions.Call(
            write=auditing.Write(
                catalog, resource, tenant, principal.sub, principal.username, row["request_id"]
            ),
            principal=principal,
            access=access,
            plan=plan,
            record_id=row["record_id"],
            params=actions.parse_params(plan, body),
            expected=row["expected"],
            idempotency=None,
            report=report,
        )
        answer = await actions.run(conn, call, handler, lambda o: record_answer(access, resource, o))
    else:
        service = catalog.any_service(row["target"])
        splan = service.actions.get(row["action"]) if service is not None else None
        if service is None or splan is None:
            raise _gone(job)
        services.permit(catalog, principal, service, splan)
        shandler = actions.runner(service.key, splan, invoker)
        scall = services.Call(
            service=service,
            plan=splan,
            tenant=tenant,
            principal=principal,
            params=actions.parse_params(splan, body),
            call_id=job.id,
            request_id=row["request_id"],
            report=report,
        )
        answer = await services.run(conn, scall, shandler, services.answer)
    return json.loads(answer.body)


class LeaseLost(Exception):  # noqa: N818 -- a signal, not an error
    """Another worker took the job (this one's lease ran out): its work is rolled back."""


class Worker:
    """The job loops of one process; :meth:`start` with the app, :meth:`stop` before the pool closes."""

    def __init__(
        self,
        dsn: str,
        current: Callable[[], Catalog],
        *,
        lease: float,
        allow: Sequence[callbacks.Network] = (),
        secret: str | None = None,
        slots: int = SLOTS,
        poll: float = POLL,
        invoker: Callable[[], sidecars.Invoker | None] = lambda: None,
    ) -> None:
        self.dsn, self.current, self.lease = dsn, current, lease
        self.invoker = invoker  # read per job: the bridge attaches after the worker is made
        self._pool: asyncpg.Pool | None = None
        self.allow, self.secret, self.slots, self.poll = tuple(allow), secret, slots, poll
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._wake = asyncio.Event()
        self._swept = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self.saga_wake: Callable[[], None] = lambda: None  # the saga engine, told of a saga handed to it
        self.sagas: sagas.Engine | None = None  # the process's saga engine: a saga's request hands it over

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "the worker is not started"
        return self._pool

    async def start(self) -> None:
        # a pool of its own: a running job holds a connection for its whole transaction and needs
        # two more (progress, heartbeat), which must never wait behind requests, nor starve them
        self._pool = await db.open_pool(self.dsn, 3 * self.slots + 1)
        self._tasks = [asyncio.create_task(self._loop(), name=f"job-worker-{i}") for i in range(self.slots)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._pool is not None:
            try:  # the runs just cancelled were rolled back: hand their jobs to the next process
                async with db.connection(self._pool) as conn:
                    await jobs.release(conn, self.name)
            except Exception as exc:  # Postgres away: the leases run out instead
                log.warning("could not hand back running jobs: %s", exc.__class__.__name__)
            await self._pool.close()
            self._pool = None

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                worked = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Postgres away, a bug: log, wait, go on
                log.warning("job worker step failed: %s: %s", exc.__class__.__name__, exc)
                worked = False
                await asyncio.sleep(1.0)
            if not worked:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):  # not wait_for: 3.11 loses a stop there
                        await self._wake.wait()
                self._wake.clear()

    async def step(self) -> bool:
        """Run one job or deliver one callback; ``False`` when nothing was due."""
        async with db.connection(self.pool) as conn:
            now = time.monotonic()
            if now - self._swept >= SWEEP:  # once a second per process is plenty: leases are long
                self._swept = now
                await jobs.expire(conn)
            job = await jobs.claim(conn, self.name, self.lease)
        if job is not None:
            await self.run(job)
            return True
        async with db.connection(self.pool) as conn:
            due = await jobs.claim_callback(conn, callbacks.TIMEOUT * 3)
        if due is not None:
            await self.deliver(due)
            return True
        return False

    async def _beat(self, job_id: uuid.UUID) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                async with db.connection(self.pool) as conn:
                    if not await jobs.heartbeat(conn, job_id, self.name, self.lease):
                        return  # another worker holds it now; this run's commit will be refused
            except Exception as exc:  # Postgres away or busy: try again at the next beat
                log.warning("job %s: heartbeat failed: %s", job_id, exc.__class__.__name__)

    async def run(self, job: jobs.Job) -> None:
        """Run a claimed job to ``succeeded`` or ``failed`` (or leave it to the next claim).
        A saga's job is handed to the saga engine instead (``sagas.adopt``), which finishes it."""
        if sagas.is_saga(self.current(), job):
            async with db.connection(self.pool) as conn:
                if await sagas.adopt(conn, job, self.name):
                    self.saga_wake()
            return

        async def report(progress: float) -> None:
            async with db.connection(self.pool) as side:
                await jobs.report(side, job.id, self.name, progress)

        beat = asyncio.create_task(self._beat(job.id))
        row = job.row
        attributes = {"dap.tenant": str(row["tenant_id"]), "dap.job_id": str(job.id), "dap.run": row["runs"]}
        try:
            # a child of the span that queued the job (its row's traceparent), in this process or another
            with tracing.span(
                f"job {row['kind']} {row['target']}.{row['action']}",
                kind="consumer",
                parent=row["traceparent"],
                attributes=attributes,
            ):
                async with db.connection(self.pool) as conn:
                    try:
                        async with conn.transaction():
                            result = await execute(conn, self.current(), job, report, self.invoker())
                            if not await jobs.succeed(conn, job.id, self.name, result):
                                raise LeaseLost
                    except LeaseLost:
                        log.warning("job %s: lease lost to another worker; its run was rolled back", job.id)
                    except errors.ApiError as exc:
                        await jobs.fail(conn, job.id, self.name, exc.problem())
                    except db.UNREACHABLE:
                        raise  # the lease runs out and another claim runs it again
                    except Exception:
                        log.exception("job %s failed", job.id)
                        problem = errors.InternalError(f"internal error; quote job id {job.id}").problem()
                        await jobs.fail(conn, job.id, self.name, problem)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def deliver(self, job: jobs.Job) -> None:
        """POST one due callback; record delivered, retried later, or failed."""
        row = job.row
        retry = RetryDecl(**row["callback_retry"]) if row["callback_retry"] else RetryDecl()
        now = dt.datetime.now(dt.UTC)
        body = _dumps({"type": f"job.{row['state']}", "timestamp": now.isoformat(), "data": job.view()})
        error: str | None
        if row["callback_sign"] and self.secret is None:
            error = "the callback must be signed and this server has no --callback-secret"
        else:
            secret = self.secret or ""
            headers = callbacks.signed(secret, str(job.id), now, body) if row["callback_sign"] else {}
            with tracing.span("job callback", kind="client", parent=row["traceparent"]):
                tracing.inject(headers)  # the receiver may continue the job's trace
                error = await callbacks.send(row["callback_url"], body, headers, self.allow)
        retry_in = None if error is None else callbacks.backoff(retry, row["callback_attempts"] + 1)
        if error is not None:
            log.info("job %s: callback not delivered (%s)", job.id, error)
        async with db.connection(self.pool) as conn:
            await jobs.callback_done(conn, job.id, error, retry_in)
