"""A saga's drive: one claimed saga run step by step until it ends or parks, never guessing.

Split from ``sagas`` (the engine's loops, claims and leases) so each stays small: this module is
what a drive does with the row it holds — forward steps, status checks, compensations, parking and
the end, each transition one commit (``saga_store.move``). The engine hands it the means it
shares (pool, HTTP session, the app process' invoker, the current catalog) through :class:`Means`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import asyncpg

from dap.config import durations
from dap.config.actions import Action
from dap.config.sagas import SagaCall, SagaStep
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.catalog import machines as compiled
from dap.server.events import outbox
from dap.server.storage import db
from dap.server.workflows import saga_steps, sidecars
from dap.server.workflows import saga_store as store

log = logging.getLogger(__name__)
OUTCOME_UNKNOWN = "SVC.SAGA.OUTCOME_UNKNOWN"
COMPENSATION_FAILED = "SVC.SAGA.COMPENSATION_FAILED"


def steps_of(plan: compiled.ActionPlan | None) -> tuple[SagaStep, ...] | None:
    """The steps of a saga action; ``None`` for any other action. Pure."""
    return declared_steps(plan.declared if plan is not None else None)


def declared_steps(declared: Action | None) -> tuple[SagaStep, ...] | None:
    """The steps of a declared saga action; ``None`` for any other action. Pure."""
    impl = declared.impl if declared is not None else None
    return impl.steps if impl is not None and impl.type == "saga" else None


class Means(Protocol):
    """What a drive uses of its engine (``sagas.Engine``)."""

    current: Callable[[], Catalog]
    invoker: Callable[[], sidecars.Invoker | None]

    @property
    def pool(self) -> asyncpg.Pool: ...

    @property
    def http(self) -> aiohttp.ClientSession: ...


@dataclass
class _Undone(Exception):  # noqa: N818 -- a signal: the call did not apply, roll its transaction back
    outcome: saga_steps.Outcome


class Drive:
    """One claimed saga driven until it ends or parks (each method commits one transition)."""

    def __init__(self, engine: Means, row: asyncpg.Record | Mapping[str, Any], holder: str) -> None:
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
            http=self.engine.http,
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
        call holds no connection while it waits; its ``done`` commits after it, on a connection
        outside a transaction: ``on_done`` is one statement, or opens one for several)."""
        timeout = durations.parse(step.timeout).total_seconds()
        if call.http is not None:
            outcome = await saga_steps.run(self._env(catalog), call, None, step.name, phase, timeout)
            if outcome.kind == "done" and on_done is not None:  # no writes of its own to join
                async with db.connection(self.engine.pool) as conn:
                    await on_done(conn, outcome)
            return outcome
        if call.sidecar is not None:
            return await self._app_call(catalog, call, step, phase, timeout, on_done)
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

    async def _app_call(
        self,
        catalog: Catalog,
        call: SagaCall,
        step: SagaStep,
        phase: str,
        seconds: float,
        on_done: Callable[[db.Connection, saga_steps.Outcome], Any] | None,
    ) -> saga_steps.Outcome:
        """An app-process call whose transaction begins only when the app's first ``/ctx``
        statement joins it: its writes still commit with ``on_done``'s or roll back with the call,
        and a call that writes nothing through ``/ctx`` (nothing to join) commits ``on_done``
        alone, one statement with no BEGIN and COMMIT round trips, as an HTTP step's ``done``."""
        async with db.connection(self.engine.pool) as conn:
            transaction = conn.transaction()
            begun = False

            async def begin() -> None:  # under the scope's lock: one /ctx call at a time
                nonlocal begun
                if not begun:
                    await transaction.start()
                    begun = True

            try:
                outcome = await saga_steps.run(
                    self._env(catalog), call, conn, step.name, phase, seconds, begin
                )
                if outcome.kind == "done" and on_done is not None:
                    await on_done(conn, outcome)
                    if begun:
                        await transaction.commit()
                    return outcome
            except BaseException:
                if begun and conn.is_in_transaction():  # what was raised matters, not this
                    with contextlib.suppress(Exception):
                        await transaction.rollback()
                raise
            if begun:  # not applied, or a status check: the call's writes roll back
                await transaction.rollback()
            return outcome

    async def _move(
        self,
        conn: db.Connection,
        entry: store.Entry | list[store.Entry] | None,
        progress: float | None = None,
        finish: store.Finish | None = None,
        **changes: Any,
    ) -> None:
        """Commit ``changes`` (in the caller's transaction) and keep them as this drive's row."""
        await store.move(conn, self.id, self.holder, entry, progress=progress, finish=finish, **changes)
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
            entry: store.Entry = (index, step.name, "do", attempts or 1, "done", {"result": outcome.result})
            moved: dict[str, Any] = {"step": index + 1, "attempts": 0, "in_flight": False, "results": results}
            if following is None:  # the last one ends the saga in the same statement and commit
                await self._end("completed", len(steps), conn, [entry], **moved)
                return
            entries: list[store.Entry] = [entry]
            if following.kind in ("http", "sidecar"):
                # its first attempt is recorded as sent in this commit (one per step boundary, not
                # two); a restart before it leaves finds it in flight: unknown, as any sent one
                entries.append((index + 1, following.name, "do", 1, "sent", None))
                moved.update(attempts=1, in_flight=True)
                self.presented = index + 1
            await self._move(conn, entries, 100.0 * (index + 1) / (len(steps) + 1), **moved)

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

    def _event(self, name: str, payload: dict[str, Any]) -> tuple[Any, ...]:
        """The saga's event ``name`` as ``outbox.emit_args``: emitted by ``store.move``'s statement."""
        return outbox.emit_args(
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
            event = self._event(
                f"saga.{state}",
                {"saga": str(self.id), "step": step.name if step else None, "problem": problem},
            )
            await self._move(conn, entry, event=event, state=state, worker=None, lease_until=None)
            await store.finish_job(conn, self.id, "failed", None, problem, 0.0)
        log.warning("saga %s parked: %s", self.id, why)

    async def _end(
        self,
        state: str,
        count: int,
        conn: db.Connection | None = None,
        before: list[store.Entry] | None = None,
        **changes: Any,
    ) -> None:
        """The saga's end, its job's and its event in one statement (on ``conn`` when given, in
        its transaction if it has one: the last step's ``done`` ends a completed saga in its own
        statement, ``before`` its timeline entry and ``changes`` its move)."""
        if conn is None:
            async with db.connection(self.engine.pool) as conn:
                return await self._end(state, count, conn, before, **changes)
        now = dt.datetime.now(dt.UTC)
        entries = [*(before or []), (None, None, "saga", None, state, None)]
        ended = {**changes, "state": state, "worker": None, "lease_until": None, "finished_at": now}
        row = {**self.row, **changes}
        if state == "completed":
            result = {"result": row["results"], "saga": state}
            finish = store.Finish("succeeded", result, None, 100.0)
        else:
            failure = row["failure"] or {}
            problem = {
                **failure,
                "saga": {"id": str(self.id), "state": state},
                "detail": f"a step failed and the {count} step(s) before it were compensated: "
                + str(failure.get("detail", "")),
            }
            finish = store.Finish("failed", None, problem, 100.0)
        event = self._event(f"saga.{state}", {"saga": str(self.id), "results": row["results"]})
        await self._move(conn, entries, finish=finish, event=event, **ended)
