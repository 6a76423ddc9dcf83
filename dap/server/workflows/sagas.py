"""The saga engine: runs ``impl: {type: saga}`` actions step by step, durably, never guessing.

A saga action is requested like any ``call: async, track: true`` action (every protocol's
``acting.enqueue``: 202 with a job). The request's statement queues the job already handed to
this process's engine and creates the saga, held by it, with its first attempt recorded as sent
(:meth:`Engine.accept`); the engine drives it right after the commit (:meth:`Engine.take`). In a
process without an engine the job worker, claiming the job, hands it over instead (:func:`adopt`).
:class:`Engine` (one per process, beside the job worker) also claims active sagas nobody holds
(unheld, or their lease ran out) and drives each one:

- forward, step by step: a call of an HTTP or app-process target is first recorded as sent
  (``in_flight``, committed), then made with the step's idempotency key; a done step's result, the
  move to the next step and that step's ``sent`` commit together (one statement), with the step's
  own writes for native, record and app-process targets (``saga_steps``; an app-process step's
  transaction begins at the app's first ``/ctx`` call, so one that writes nothing commits alone);
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

The drive itself (forward, status checks, compensations, parking, the end) is ``saga_drive``.
A process killed at any point leaves the saga's row as last committed; its lease runs out and the
next claim (this process after a restart, or another) resumes from that row: an ``in_flight`` step
is an unknown outcome, handled as above. Nothing is run twice by a target that honours the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import asyncpg

from dap.config.sagas import SagaStep
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.workflows import jobs, sidecars
from dap.server.workflows import saga_store as store
from dap.server.workflows.saga_drive import (
    COMPENSATION_FAILED,
    OUTCOME_UNKNOWN,
    Drive,
    declared_steps,
    steps_of,
)

__all__ = [
    "COMPENSATION_FAILED",
    "OUTCOME_UNKNOWN",
    "POLL",
    "SLOTS",
    "Accepted",
    "Drive",
    "Engine",
    "adopt",
    "declared_steps",
    "is_saga",
    "steps_of",
]

log = logging.getLogger(__name__)
SLOTS = 48  # sagas one process drives at once (they mostly wait on their targets)
POLL = 0.5  # seconds between loop 0's looks at the table when idle
POOL = 16  # connections of the engine at most (a drive holds one only while it writes or a step runs in it)
WAITING = 4  # sagas accepted per slot that may wait for a loop of this process, held


def is_saga(catalog: Catalog, job: jobs.Job) -> bool:
    if job.row["kind"] != "service":
        return False
    service = catalog.any_service(job.row["target"])
    return service is not None and steps_of(service.actions.get(job.row["action"])) is not None


async def adopt(conn: db.Connection, job: jobs.Job, worker: str) -> bool:
    """Hand a claimed saga job to the engine (see ``saga_store.adopt``)."""
    return await store.adopt(conn, job.row, jobs.decode(job.row["body"]), worker)


@dataclass(frozen=True)
class Accepted:
    """A saga created in its request's transaction, held by ``holder`` (``None``: left to a claim)."""

    row: jobs.Row  # the saga's
    holder: str | None
    presented: int | None  # the step whose first attempt was recorded as sent with it
    at: float  # time.monotonic() of the acceptance


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
        self._accepted: deque[Accepted] = deque()  # held by this process, waiting for a loop

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "the saga engine is not started"
        return self._pool

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "the saga engine is not started"
        return self._http

    async def start(self) -> None:
        # a drive holds a connection only while it writes, or while a native, record or app-process
        # step runs in its transaction; HTTP steps wait holding none
        self._pool = await db.open_pool(self.dsn, max(4, min(POOL, self.slots // 2 + 2)))
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

    async def accept(
        self, conn: db.Connection, new: jobs.New, steps: tuple[SagaStep, ...]
    ) -> tuple[jobs.Job, Accepted]:
        """Queue the job ``new`` and create its saga in one statement on ``conn`` (the request's,
        in its transaction when it has one), held by a claim of this engine so it runs here right
        after the commit (:meth:`take`) without the job worker's claim and hand-over nor this
        engine's claim; its first step's first attempt is recorded as sent in that commit when it
        is an HTTP or app-process call. More than ``WAITING`` per slot already waiting here:
        created unheld, for the next claim."""
        first = steps[0] if steps else None
        sent = first.name if first is not None and first.kind in ("http", "sidecar") else None
        holder = self._holder() if len(self._accepted) < WAITING * self.slots and self._tasks else None
        job, row = await store.accept(conn, new, holder, self.lease, sent)
        return jobs.Job(job), Accepted(row, holder, 0 if sent is not None else None, time.monotonic())

    def take(self, accepted: Accepted) -> None:
        """Run a saga :meth:`accept` created, once its transaction committed (its commit lost:
        not called; a held saga's lease runs out and the next claim takes it)."""
        if accepted.holder is not None:
            self._accepted.append(accepted)
        self.wake()

    def _holder(self) -> str:
        return f"{self.name}:{uuid.uuid4().hex[:8]}"  # one per claim, not per process

    def wake(self) -> None:
        if self._wake._value < self.slots:
            self._wake.release()

    async def _loop(self, index: int) -> None:
        """Loop 0 looks at the table every ``poll`` seconds when idle (sagas of other processes,
        leases run out); the others sleep until woken (a saga handed over here, or a loop that
        just claimed one: there may be more), so an idle process costs one query per ``poll``.
        A loop that just drove a saga accepted here claims only when woken: a saga created unheld
        wakes one (:meth:`take`), and the wake is counted while every loop is busy, so the claim
        that used to follow every saga (a query per saga, on the next request's heels) is gone."""
        claim = True
        if index > 0:  # at start only loop 0 looks: 48 claims at once opened the whole pool at boot
            await self._wake.acquire()
        while True:
            try:
                worked = await self._step(claim)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("saga step failed: %s: %s", exc.__class__.__name__, exc)
                worked = None
                await asyncio.sleep(1.0)
            claim = worked != "accepted"
            if worked is not None:
                continue
            claim = True
            if index > 0:
                await self._wake.acquire()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):
                        await self._wake.acquire()

    async def step(self) -> bool:
        """Drive one saga (accepted here, else claimable) to its end or its parking; ``False``
        when none was due."""
        return await self._step(True) is not None

    async def _step(self, claim: bool) -> str | None:
        """:meth:`step`, claiming only if ``claim``: ``"accepted"`` or ``"claimed"``, the saga
        it drove; ``None`` when none was due."""
        drive = await self._accepted_drive() if self._accepted else None
        claimed = drive is None
        if drive is None:
            if not claim:
                return None
            holder = self._holder()
            async with db.connection(self.pool) as conn:
                row = await store.claim(conn, holder, self.lease)
            if row is None:
                return None
            drive = Drive(self, row, holder)
        if claimed or self._accepted:
            self.wake()  # another loop looks for the next one
        beat = asyncio.create_task(self._beat(drive.id, drive.holder))
        try:
            await drive.run()
        except store.Lost:
            log.warning("saga %s: lease lost to another process; it goes on there", drive.id)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        return "claimed" if claimed else "accepted"

    async def _accepted_drive(self) -> Drive | None:
        """The drive of the oldest saga accepted here; one that waited longer than a third of its
        lease is first confirmed held (its lease extended), else left to whoever holds it now."""
        accepted = self._accepted.popleft()
        assert accepted.holder is not None
        if time.monotonic() - accepted.at > self.lease / 3:
            async with db.connection(self.pool) as conn:
                if not await store.heartbeat(conn, accepted.row["id"], accepted.holder, self.lease):
                    return None
        drive = Drive(self, accepted.row, accepted.holder)
        drive.presented = accepted.presented
        return drive

    async def _beat(self, saga_id: uuid.UUID, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                async with db.connection(self.pool) as conn:
                    if not await store.heartbeat(conn, saga_id, holder, self.lease):
                        return
            except Exception as exc:
                log.warning("saga %s: heartbeat failed: %s", saga_id, exc.__class__.__name__)
