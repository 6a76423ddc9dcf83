"""The saga engine: runs ``impl: {type: saga}`` actions step by step, durably, never guessing.

A saga action is requested like any ``call: async, track: true`` action (every protocol's
``acting.enqueue``: 202 with a job). The job worker, claiming that job, hands it here
(:func:`adopt`: the saga's row and the job handed over in one transaction). :class:`Engine` (one per
process, beside the job worker) claims active sagas with a lease and drives each one:

- forward, step by step: a call of an HTTP or app-process target is first recorded as sent
  (``in_flight``, committed), then made with the step's idempotency key; a done step's result, the
  move to the next step and that step's ``sent`` commit together, with the step's own writes for
  native, record and app-process targets (``saga_steps``);
- an outcome that cannot be known (``saga_steps``: timeout, connection lost after sending, 502/504)
  is never guessed: the step's ``status`` check is asked when declared, else the step is sent
  again with the same key while its ``retries`` last, else the saga parks as
  ``SVC.SAGA.OUTCOME_UNKNOWN`` (the job fails with that code, ``saga.outcome_unknown`` goes to the
  event stream, the saga appears in ``GET /{ws}/api/_sagas``, the operators' inbox);
- a refused step (or one never applied after its retries) compensates the completed steps in
  reverse; a compensation that still fails after its retries parks the saga as
  ``SVC.SAGA.COMPENSATION_FAILED``;
- a person holding the saga's resolve permission sends a parked saga on (``saga_decisions``:
  retry, skip with a reason, resolve), audited in ``dap.audit_log`` and in the saga's timeline.

A process killed at any point leaves the saga's row as last committed; its lease runs out and the
next claim (this process after a restart, or another) resumes from that row: an ``in_flight`` step
is an unknown outcome, handled as above. Nothing is run twice by a target that honours the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg

from dap.config import durations
from dap.config.sagas import SagaCall, SagaStep
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.catalog import machines as compiled
from dap.server.events import outbox
from dap.server.storage import db
from dap.server.workflows import jobs, saga_steps, sidecars
from dap.server.workflows import saga_store as store

log = logging.getLogger(__name__)
OUTCOME_UNKNOWN = "SVC.SAGA.OUTCOME_UNKNOWN"
COMPENSATION_FAILED = "SVC.SAGA.COMPENSATION_FAILED"
SLOTS = 16  # sagas one process drives at once (they mostly wait on their targets)
POLL = 0.5  # seconds between loop 0's looks at the table when idle


def steps_of(plan: compiled.ActionPlan | None) -> tuple[SagaStep, ...] | None:
    """The steps of a saga action; ``None`` for any other action. Pure."""
    declared = plan.declared if plan is not None else None
    impl = declared.impl if declared is not None else None
    return impl.steps if impl is not None and impl.type == "saga" else None


def is_saga(catalog: Catalog, job: jobs.Job) -> bool:
    if job.row["kind"] != "service":
        return False
    service = catalog.any_service(job.row["target"])
    return service is not None and steps_of(service.actions.get(job.row["action"])) is not None


async def adopt(conn: db.Connection, job: jobs.Job, worker: str) -> bool:
    """Hand a claimed saga job to the engine (see ``saga_store.adopt``)."""
    return await store.adopt(conn, job.row, jobs.decode(job.row["body"]), worker)


@dataclass
class _Undone(Exception):  # noqa: N818 -- a signal: the call did not apply, roll its transaction back
    outcome: saga_steps.Outcome


class Engine:
    """The saga loops of one process; :meth:`start` with the app, :meth:`stop` before the pool closes."""

    def __init__(
        self,
        dsn: str,
        current: Callable[[], Catalog],
        *,
        lease: float,
        invoker: Callable[[], sidecars.Invoker | None] = lambda: None,
        slots: int = SLOTS,
        poll: float = POLL,
    ) -> None:
        self.dsn, self.current, self.lease, self.invoker = dsn, current, lease, invoker
        self.slots, self.poll = slots, poll
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._pool: asyncpg.Pool | None = None
        self._http: aiohttp.ClientSession | None = None
        self._wake = asyncio.Semaphore(0)  # one release wakes one loop (no herd of claims)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "the saga engine is not started"
        return self._pool

    async def start(self) -> None:
        # a drive holds a connection only while it writes, or while a native, record or app-process
        # step runs in its transaction; HTTP steps wait holding none
        self._pool = await db.open_pool(self.dsn, max(4, self.slots // 2 + 2))
        self._http = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._loop(i), name=f"saga-{i}") for i in range(self.slots)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._http is not None:
            await self._http.close()
        if self._pool is not None:
            try:
                async with db.connection(self._pool) as conn:
                    await store.release(conn, self.name)
            except Exception as exc:
                log.warning("could not hand back running sagas: %s", exc.__class__.__name__)
            await self._pool.close()
            self._pool = None

    def wake(self) -> None:
        if self._wake._value < self.slots:
            self._wake.release()

    async def _loop(self, index: int) -> None:
        """Loop 0 looks at the table every ``poll`` seconds when idle (sagas of other processes,
        leases run out); the others sleep until woken (a saga handed over here, or a loop that
        just claimed one: there may be more), so an idle process costs one query per ``poll``."""
        while True:
            try:
                worked = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("saga step failed: %s: %s", exc.__class__.__name__, exc)
                worked = False
                await asyncio.sleep(1.0)
            if not worked and index > 0:
                await self._wake.acquire()
            elif not worked:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):
                        await self._wake.acquire()

    async def step(self) -> bool:
        """Drive one claimable saga to its end or its parking; ``False`` when none was due."""
        holder = f"{self.name}:{uuid.uuid4().hex[:8]}"  # one per claim, not per process
        async with db.connection(self.pool) as conn:
            row = await store.claim(conn, holder, self.lease)
        if row is None:
            return False
        self.wake()  # another loop looks for the next one
        beat = asyncio.create_task(self._beat(row["id"], holder))
        try:
            await Drive(self, row, holder).run()
        except store.Lost:
            log.warning("saga %s: lease lost to another process; it goes on there", row["id"])
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        return True

    async def _beat(self, saga_id: uuid.UUID, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                async with db.connection(self.pool) as conn:
                    if not await store.heartbeat(conn, saga_id, holder, self.lease):
                        return
            except Exception as exc:
                log.warning("saga %s: heartbeat failed: %s", saga_id, exc.__class__.__name__)


class Drive:
    """One claimed saga driven until it ends or parks (each method commits one transition)."""

    def __init__(self, engine: Engine, row: asyncpg.Record, holder: str) -> None:
        self.engine, self.id, self.holder = engine, row["id"], holder
        self.row: dict[str, Any] = dict(row)
        self.presented: int | None = None  # a step whose first attempt ``done`` recorded as sent
        p = row["principal"]
        self.principal = auth.Principal(
            sub=p.get("sub", ""),
            username=p.get("username", ""),
            roles=tuple(p.get("roles", ())),
            workspace=p.get("workspace"),
            attrs=dict(p.get("attrs", {})),
        )

    async def run(self) -> None:
        catalog = self.engine.current()
        service = catalog.any_service(self.row["service"])
        plan = service.actions.get(self.row["action"]) if service is not None else None
        steps = steps_of(plan)
        if steps is None:  # the spec no longer declares it: nothing can be run or undone here
            problem = {
                "code": OUTCOME_UNKNOWN,
                "status": 502,
                "detail": "the spec no longer declares this saga",
            }
            await self._park("outcome_unknown", problem, None, "the saga's action is gone from the spec")
            return
        while True:  # the row as this holder last committed it (no one else writes it meanwhile)
            state, index = self.row["state"], self.row["step"]
            if state == "running":
                if index >= len(steps):
                    await self._end("completed", len(steps))
                    return
                await self._forward(catalog, steps, steps[index])
            elif state == "compensating":
                if index < 0:
                    await self._end("compensated", len(steps))
                    return
                await self._backward(catalog, steps[index])
            else:
                return

    # --- the calls -----------------------------------------------------------------------------

    def _env(self, catalog: Catalog) -> saga_steps.Env:
        assert self.engine._http is not None
        return saga_steps.Env(
            saga_id=self.id,
            tenant=self.row["tenant_id"],
            service=self.row["service"],
            action=self.row["action"],
            principal=self.principal,
            params=self.row["params"],
            results=self.row["results"],
            request_id=self.row["request_id"],
            catalog=catalog,
            invoker=self.engine.invoker,
            http=self.engine._http,
        )

    async def _call(
        self,
        catalog: Catalog,
        call: SagaCall,
        step: SagaStep,
        phase: str,
        on_done: Callable[[db.Connection, saga_steps.Outcome], Any] | None,
    ) -> saga_steps.Outcome:
        """Make one call; when done, ``on_done`` commits in the call's own transaction (an HTTP
        call holds no connection while it waits; its ``done`` commits after it)."""
        timeout = durations.parse(step.timeout).total_seconds()
        if call.http is not None:
            outcome = await saga_steps.run(self._env(catalog), call, None, step.name, phase, timeout)
            if outcome.kind == "done" and on_done is not None:  # no writes of its own to join:
                async with db.connection(self.engine.pool) as conn, conn.transaction():  # one commit
                    await on_done(conn, outcome)
            return outcome
        async with db.connection(self.engine.pool) as conn:
            try:
                async with conn.transaction():
                    outcome = await saga_steps.run(self._env(catalog), call, conn, step.name, phase, timeout)
                    if outcome.kind != "done" or on_done is None:
                        raise _Undone(outcome)
                    await on_done(conn, outcome)
                    return outcome
            except _Undone as undone:
                return undone.outcome

    async def _move(self, conn: db.Connection, entry: store.Entry | None, **changes: Any) -> None:
        """Commit ``changes`` (in the caller's transaction) and keep them as this drive's row."""
        await store.move(conn, self.id, self.holder, entry, **changes)
        self.row.update(changes)

    async def _sent(self, step: SagaStep, phase: str, attempt: int) -> None:
        """Record an attempt as sent before sending it: after a crash its outcome is unknown."""
        entry = (self.row["step"], step.name, phase, attempt, "sent", None)
        async with db.connection(self.engine.pool) as conn:
            await self._move(conn, entry, attempts=attempt, in_flight=True)

    async def _note(
        self, step: SagaStep, phase: str, attempt: int, outcome: saga_steps.Outcome, **changes: Any
    ) -> None:
        entry = (self.row["step"], step.name, phase, attempt, outcome.kind, outcome.problem)
        async with db.connection(self.engine.pool) as conn:
            await self._move(conn, entry, **changes)

    # --- forward -------------------------------------------------------------------------------

    async def _forward(self, catalog: Catalog, steps: tuple[SagaStep, ...], step: SagaStep) -> None:
        row, index = self.row, self.row["step"]
        attempts, limit = row["attempts"], 1 + step.retries
        external = step.kind in ("http", "sidecar")
        presented, self.presented = self.presented == index, None
        following = steps[index + 1] if index + 1 < len(steps) else None

        async def done(conn: db.Connection, outcome: saga_steps.Outcome) -> None:
            results = {**row["results"], step.name: outcome.result}
            entry = (index, step.name, "do", attempts or 1, "done", {"result": outcome.result})
            await self._move(conn, entry, step=index + 1, attempts=0, in_flight=False, results=results)
            await store.progress(conn, self.id, 100.0 * (index + 1) / (len(steps) + 1))
            if following is None:
                await self._end("completed", len(steps), conn)
            elif following.kind in ("http", "sidecar"):
                # its first attempt is recorded as sent in this commit (one per step boundary, not
                # two); a restart before it leaves finds it in flight: unknown, as any sent one
                ahead = (index + 1, following.name, "do", 1, "sent", None)
                await self._move(conn, ahead, attempts=1, in_flight=True)
                self.presented = index + 1

        if presented:  # sent with the previous step's done: no backoff, no recovery, no second sent
            attempt = attempts
        elif row["in_flight"]:  # the last attempt was sent and its outcome never recorded
            verdict = await self._status(catalog, step, attempts)
            if verdict is not None and verdict.kind == "done":
                async with db.connection(self.engine.pool) as conn, conn.transaction():
                    await done(conn, verdict)
                return
            if verdict is not None:  # the target says it was not applied: sending again is safe
                await self._note(step, "do", attempts, verdict, in_flight=False)
                return
            if attempts >= limit:
                cause = row["failure"]
                detail = (
                    f"step {step.name!r} ({index + 1} of {len(steps)}) of {row['service']}/{row['action']}: "
                    f"its outcome is unknown after {attempts} attempt(s) and no status check could tell; "
                    "nothing was guessed: a person holding the saga's resolve permission can retry it, "
                    "skip it or resolve it (POST /{ws}/api/_sagas/" + str(self.id) + "/retry|skip|resolve)"
                )
                await self._park(
                    "outcome_unknown",
                    saga_steps.parked(OUTCOME_UNKNOWN, detail, row, cause),
                    step,
                    "outcome unknown",
                )
                return
        elif attempts >= limit:  # every attempt was refused before it was sent, or not applied
            await self._fail(step, row["failure"] or {"detail": "not applied after its retries"})
            return
        if not presented:
            await asyncio.sleep(saga_steps.backoff(attempts))
            attempt = attempts + 1
            if external:
                await self._sent(step, "do", attempt)
        outcome = await self._call(catalog, step, step, "do", done)
        if outcome.kind == "done":
            return
        if outcome.kind == "refused":
            await self._fail(step, outcome.problem, attempt)
        else:  # not applied: sent again; unknown: stays in flight (the status check, or sent again)
            flying, failure = outcome.kind != "unavailable", outcome.problem
            await self._note(
                step, "do", attempt, outcome, attempts=attempt, in_flight=flying, failure=failure
            )

    async def _status(self, catalog: Catalog, step: SagaStep, attempt: int) -> saga_steps.Outcome | None:
        """The status check's verdict: done (applied), refused (not applied), ``None`` (unknown)."""
        if step.status is None:
            return None
        answer = await self._call(catalog, step.status, step, "status", None)
        applied = saga_steps.applied_of(answer)
        async with db.connection(self.engine.pool) as conn, conn.transaction():
            outcome = "applied" if applied else ("not_applied" if applied is False else "unknown")
            await store.log(
                conn,
                self.id,
                self.row["step"],
                step.name,
                "status",
                attempt,
                outcome,
                answer.problem or answer.result,
            )
        if applied is None:
            return None
        if applied:
            result = answer.result.get("result") if isinstance(answer.result, dict) else None
            return saga_steps.Outcome("done", result=result)
        return saga_steps.Outcome(
            "unavailable",
            problem={
                "code": "SVC.SAGA.NOT_APPLIED",
                "detail": "the status check says the step was not applied",
            },
        )

    async def _fail(self, step: SagaStep, problem: Any, attempt: int | None = None) -> None:
        """The step is not applied: compensate the completed ones, last first."""
        entry = (self.row["step"], step.name, "do", attempt, "failed", problem)
        async with db.connection(self.engine.pool) as conn:
            await self._move(
                conn,
                entry,
                state="compensating",
                step=self.row["step"] - 1,
                attempts=0,
                in_flight=False,
                failure=problem,
            )

    # --- backward ------------------------------------------------------------------------------

    async def _backward(self, catalog: Catalog, step: SagaStep) -> None:
        row, index = self.row, self.row["step"]
        comp = step.compensation
        if not isinstance(comp, SagaCall):  # compensation: none
            entry = (index, step.name, "undo", None, "none", None)
            async with db.connection(self.engine.pool) as conn:
                await self._move(conn, entry, step=index - 1, attempts=0, in_flight=False)
            return
        attempts, limit = row["attempts"], 1 + step.retries
        if attempts >= limit:
            detail = (
                f"the compensation of step {step.name!r} of {row['service']}/{row['action']} failed "
                f"{attempts} time(s); the saga is parked with steps 1 to {index + 1} still to undo: a person "
                "holding the saga's resolve permission can retry it, skip it with a reason (undone by hand) "
                "or resolve it (POST /{ws}/api/_sagas/" + str(self.id) + "/retry|skip|resolve)"
            )
            cause = {"compensating": step.name, "failure": row["failure"]}
            await self._park(
                "compensation_failed",
                saga_steps.parked(COMPENSATION_FAILED, detail, row, cause),
                step,
                "compensation failed",
            )
            return
        await asyncio.sleep(saga_steps.backoff(attempts))
        attempt = attempts + 1
        if comp.kind in ("http", "sidecar"):
            await self._sent(step, "undo", attempt)

        async def undone(conn: db.Connection, outcome: saga_steps.Outcome) -> None:
            entry = (index, step.name, "undo", attempt, "done", {"result": outcome.result})
            await self._move(conn, entry, step=index - 1, attempts=0, in_flight=False)

        outcome = await self._call(catalog, comp, step, "undo", undone)
        if outcome.kind != "done":  # sent again with the same key while its retries last
            await self._note(step, "undo", attempt, outcome, attempts=attempt, in_flight=False)

    # --- ends ----------------------------------------------------------------------------------

    async def _event(self, conn: db.Connection, name: str, payload: dict[str, Any]) -> None:
        await outbox.emit(
            conn,
            tenant=self.row["tenant_id"],
            entity=self.row["service"],
            record_id=self.id,
            action=self.row["action"],
            event=name,
            payload=payload,
            actor_sub=self.principal.sub,
            actor_username=self.principal.username,
            request_id=self.row["request_id"],
        )

    async def _park(self, state: str, problem: dict[str, Any], step: SagaStep | None, why: str) -> None:
        async with db.connection(self.engine.pool) as conn, conn.transaction():
            entry = (self.row["step"], step.name if step else None, "saga", None, state, problem)
            await self._move(conn, entry, state=state, worker=None, lease_until=None)
            await store.finish_job(conn, self.id, "failed", None, problem, 0.0)
            await self._event(
                conn,
                f"saga.{state}",
                {"saga": str(self.id), "step": step.name if step else None, "problem": problem},
            )
        log.warning("saga %s parked: %s", self.id, why)

    async def _end(self, state: str, count: int, conn: db.Connection | None = None) -> None:
        """The saga's end, its job's and its event in one transaction (``conn``'s when given: the
        last step's ``done`` ends a completed saga in its own commit)."""
        if conn is None:
            async with db.connection(self.engine.pool) as conn, conn.transaction():
                return await self._end(state, count, conn)
        row, now = self.row, dt.datetime.now(dt.UTC)
        entry = (None, None, "saga", None, state, None)
        await self._move(conn, entry, state=state, worker=None, lease_until=None, finished_at=now)
        if state == "completed":
            result = {"result": row["results"], "saga": state}
            await store.finish_job(conn, self.id, "succeeded", result, None, 100.0)
        else:
            failure = row["failure"] or {}
            problem = {
                **failure,
                "saga": {"id": str(self.id), "state": state},
                "detail": f"a step failed and the {count} step(s) before it were compensated: "
                + str(failure.get("detail", "")),
            }
            await store.finish_job(conn, self.id, "failed", None, problem, 100.0)
        await self._event(conn, f"saga.{state}", {"saga": str(self.id), "results": row["results"]})
