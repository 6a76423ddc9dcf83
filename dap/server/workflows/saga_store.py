"""``dap.sagas`` and ``dap.saga_log``: a saga's durable progress, and its job row kept in step.

One row per saga (its id is its job's id) says where it is: ``state`` (``running``,
``compensating``, then ``completed`` | ``compensated``, or parked as ``outcome_unknown`` |
``compensation_failed``), ``step`` (the step being run forward, or being compensated backward),
``attempts`` of that step and ``in_flight`` (an attempt was sent and its outcome is not recorded:
after a crash it is an unknown outcome, never a guess). ``dap.saga_log`` is the timeline: every
attempt, outcome, compensation and person's decision, appended in the transaction that makes the
change, so the timeline and the state never disagree.

A saga is claimed like a job (``FOR UPDATE SKIP LOCKED``, a lease extended while it runs); a
process killed mid-step leaves a lease that runs out, and the next claim resumes it from the row.
The saga's job row (``dap.jobs``) is inserted already handed to the engine, by the statement that
creates the saga (:func:`accept`, when the process runs an engine), else handed over when the job
worker first claims it (:func:`adopt`): ``worker = 'saga'``, a lease that never runs out, so no job
claim takes it; it is finished in the statement that ends the saga (:func:`move` with ``finish``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server.events import outbox
from dap.server.storage import db
from dap.server.workflows import jobs

OWNER = "saga"  # dap.jobs.worker of a job whose saga the engine runs
ACTIVE = ("running", "compensating")
PARKED = ("outcome_unknown", "compensation_failed")
FINAL = ("completed", "compensated")

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.sagas (
    id uuid PRIMARY KEY,
    tenant_id uuid NOT NULL,
    service text NOT NULL,
    action text NOT NULL,
    principal jsonb NOT NULL,
    params jsonb NOT NULL,
    request_id text,
    state text NOT NULL DEFAULT 'running',
    step integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,
    in_flight boolean NOT NULL DEFAULT false,
    results jsonb NOT NULL DEFAULT '{}',
    failure jsonb,
    worker text,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS sagas_open ON dap.sagas (updated_at) WHERE state IN ('running', 'compensating');
CREATE INDEX IF NOT EXISTS sagas_parked ON dap.sagas (tenant_id, updated_at)
    WHERE state IN ('outcome_unknown', 'compensation_failed');
CREATE TABLE IF NOT EXISTS dap.saga_log (
    saga_id uuid NOT NULL,
    seq bigserial,
    at timestamptz NOT NULL DEFAULT now(),
    step integer,
    name text,
    phase text NOT NULL,
    attempt integer,
    outcome text NOT NULL,
    detail jsonb,
    actor text,
    PRIMARY KEY (saga_id, seq)
);
"""
COLUMNS = (
    "id, tenant_id, service, action, principal, params, request_id, state, step, attempts, in_flight, "
    "results, failure, created_at, updated_at, finished_at"
)
_CLAIM = f"""
UPDATE dap.sagas SET worker = $1, lease_until = now() + make_interval(secs => $2)
WHERE id = (
    SELECT id FROM dap.sagas
    WHERE state IN ('running', 'compensating') AND (lease_until IS NULL OR lease_until < now())
    ORDER BY updated_at FOR UPDATE SKIP LOCKED LIMIT 1
)
RETURNING {COLUMNS}
"""


def _json(value: Any) -> str:
    return json.dumps(value, default=db.json_default, separators=(",", ":"))


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def adopt(conn: db.Connection, job: jobs.Row, params: dict[str, Any], worker: str) -> bool:
    """The saga of a claimed job, created with the job handed to the engine (one transaction);
    ``False`` when the job worker no longer holds the job."""
    async with conn.transaction():
        done = await conn.execute(
            "UPDATE dap.jobs SET worker = $3, lease_until = 'infinity' "
            "WHERE id = $1 AND worker = $2 AND state = 'running'",
            job["id"],
            worker,
            OWNER,
        )
        if not done.endswith(" 1"):
            return False
        await conn.execute(
            "INSERT INTO dap.sagas (id, tenant_id, service, action, principal, params, request_id) "
            "VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7) ON CONFLICT (id) DO NOTHING",
            job["id"],
            job["tenant_id"],
            job["target"],
            job["action"],
            job["principal"],
            _json(params),
            job["request_id"],
        )
        await log(
            conn, job["id"], None, None, "saga", None, "accepted", None, job["principal"].get("username")
        )
    return True


# the saga's job inserted already handed to the engine (``running``, ``worker = 'saga'``, a lease
# that never runs out: no job claim takes it), its saga, the ``accepted`` entry and the first
# step's ``sent``: one statement, atomic without a transaction of its own
_SAGA_COLUMNS = ", ".join(f"saga.{c} AS saga_{c}" for c in COLUMNS.split(", "))
_ACCEPT = f"""
WITH job AS (
    INSERT INTO dap.jobs ({jobs.INSERTED}, state, runs, worker, lease_until, started_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
        'running', 1, '{OWNER}', 'infinity', now())
    RETURNING {jobs.COLUMNS}
), saga AS (
    INSERT INTO dap.sagas (id, tenant_id, service, action, principal, params, request_id, worker,
        lease_until, attempts, in_flight)
    SELECT id, tenant_id, target, action, principal, $15::text::jsonb, request_id, $16::text,
        CASE WHEN $16::text IS NULL THEN NULL ELSE now() + make_interval(secs => $17) END,
        CASE WHEN $18::text IS NULL THEN 0 ELSE 1 END, $18::text IS NOT NULL
    FROM job
    RETURNING {COLUMNS}
), logged AS (
    INSERT INTO dap.saga_log (saga_id, step, name, phase, attempt, outcome, actor)
    SELECT id, NULL, NULL, 'saga', NULL, 'accepted', principal->>'username' FROM saga
    UNION ALL SELECT id, 0, $18::text, 'do', 1, 'sent', NULL FROM saga WHERE $18::text IS NOT NULL
)
SELECT job.*, {_SAGA_COLUMNS} FROM job, saga
"""


async def accept(
    conn: db.Connection,
    new: jobs.New,
    holder: str | None,
    lease: float,
    sent: str | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saga's job and the saga itself, created together (the request's statement, in its
    transaction when it has one): the job handed to the engine, the saga held by ``holder`` for
    ``lease`` seconds (``None``: unheld, for the next claim), and when ``sent`` names the first
    step, its first attempt recorded as sent — one statement, so one round trip and, alone, one
    commit. (job row, saga row). A process that dies after the commit leaves a lease that runs
    out; the next claim finds the step in flight: an unknown outcome, as after any ``sent``."""
    found: asyncpg.Record | None = await conn.fetchrow(
        _ACCEPT, *jobs.values(new), _json(jobs.decode(new.body)), holder, lease, sent
    )
    assert found is not None
    job = {k: v for k, v in found.items() if not k.startswith("saga_")}
    saga = {k[len("saga_") :]: v for k, v in found.items() if k.startswith("saga_")}
    return job, saga


async def claim(conn: db.Connection, worker: str, lease: float) -> asyncpg.Record | None:
    """An active saga nobody holds (new, or its holder's lease ran out), held by ``worker``."""
    row: asyncpg.Record | None = await conn.fetchrow(_CLAIM, worker, lease)
    return row


async def heartbeat(conn: db.Connection, saga_id: uuid.UUID, worker: str, lease: float) -> bool:
    done = await conn.execute(
        "UPDATE dap.sagas SET lease_until = now() + make_interval(secs => $3) WHERE id = $1 AND worker = $2",
        saga_id,
        worker,
        lease,
    )
    return done.endswith(" 1")


async def release(conn: db.Connection, worker: str) -> None:
    """A stopping process hands its sagas back at once (their next claim resumes them); its
    claims are ``<worker>:<claim>``."""
    await conn.execute(
        "UPDATE dap.sagas SET worker = NULL, lease_until = NULL WHERE worker LIKE $1 || ':%'", worker
    )


async def load(
    conn: db.Connection, saga_id: uuid.UUID, tenant: uuid.UUID | None = None
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.sagas WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)",
        saga_id,
        tenant,
    )
    return row


Entry = tuple[
    int | None, str | None, str, int | None, str, Any
]  # step, name, phase, attempt, outcome, detail


async def move(
    conn: db.Connection,
    saga_id: uuid.UUID,
    holder: str | None,
    entry: Entry | list[Entry] | None = None,
    *,
    progress: float | None = None,
    finish: Finish | None = None,
    event: tuple[Any, ...] | None = None,
    **changes: Any,
) -> None:
    """Set ``changes`` on the saga (while ``holder`` holds it; ``None``: a person's decision) and,
    when given, append ``entry`` (or several, in order) to its timeline, raise its job's
    ``progress`` or end its job (``finish``, as :func:`finish_job`), and emit ``event``
    (``outbox.emit_args``), in the same statement (one round trip, atomic: alone, one commit
    without a transaction). Raises :class:`Lost` when the holder no longer holds it (nothing of
    the statement applied; a transaction around it must roll back)."""
    sets: list[str] = []
    args: list[Any] = [saga_id, holder]
    for name, value in changes.items():
        args.append(_json(value) if name in ("results", "failure") and value is not None else value)
        cast = "::text::jsonb" if name in ("results", "failure") else ""
        sets.append(f"{name} = ${len(args)}{cast}")
    update = (
        f"UPDATE dap.sagas SET {', '.join(sets)}, updated_at = now() "
        "WHERE id = $1 AND ($2::text IS NULL OR worker = $2) RETURNING id"
    )
    entries = [] if entry is None else [entry] if isinstance(entry, tuple) else list(entry)
    parts = [f"moved AS ({update})"]
    selects = []
    for step, label, phase, attempt, outcome, detail in entries:
        n = len(args)
        args += [step, label, phase, attempt, outcome, _json(detail) if detail is not None else None]
        selects.append(
            f"SELECT id, ${n + 1}::integer, ${n + 2}::text, ${n + 3}::text, ${n + 4}::integer, "
            f"${n + 5}::text, ${n + 6}::text::jsonb FROM moved"
        )
    if selects:
        parts.append(
            "logged AS (INSERT INTO dap.saga_log (saga_id, step, name, phase, attempt, outcome, detail) "
            + " UNION ALL ".join(selects)
            + ")"
        )
    if progress is not None:
        args.append(progress)
        parts.append(
            f"job AS (UPDATE dap.jobs SET progress = greatest(progress, ${len(args)}) "
            f"WHERE id = (SELECT id FROM moved) AND worker = '{OWNER}')"
        )
    assert progress is None or finish is None, "one update of the job per statement"
    if finish is not None:  # the saga's end and its job's in one round trip (the last step's)
        args += [finish.state, _json(finish.result) if finish.result is not None else None]
        args += [_json(finish.error) if finish.error is not None else None, finish.progress]
        n, moved = len(args), "(SELECT id FROM moved)"
        finished = _FINISH.format(state=n - 3, result=n - 2, error=n - 1, progress=n, id=moved)
        parts.append(f"finished AS ({finished})")
    shown = "id"
    if event is not None:  # the saga's event, only when the holder still holds it
        ctes, expression = outbox.folded(len(args), "moved")
        args += list(event)
        parts += ctes
        shown = f"id, {expression}"
    found = await conn.fetchval(f"WITH {', '.join(parts)} SELECT {shown} FROM moved", *args)
    if found is None:
        raise Lost(saga_id)


class Lost(Exception):  # noqa: N818 -- a signal, not an error
    """Another process holds the saga now (this one's lease ran out): its transaction rolls back."""


async def log(
    conn: db.Connection,
    saga_id: uuid.UUID,
    step: int | None,
    name: str | None,
    phase: str,
    attempt: int | None,
    outcome: str,
    detail: Any,
    actor: str | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO dap.saga_log (saga_id, step, name, phase, attempt, outcome, detail, actor) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8)",
        saga_id,
        step,
        name,
        phase,
        attempt,
        outcome,
        _json(detail) if detail is not None else None,
        actor,
    )


async def timeline(conn: db.Connection, saga_id: uuid.UUID) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(
            "SELECT seq, at, step, name, phase, attempt, outcome, detail, actor FROM dap.saga_log "
            "WHERE saga_id = $1 ORDER BY seq",
            saga_id,
        )
    )


async def parked(
    conn: db.Connection, tenant: uuid.UUID, state: str | None, limit: int, offset: int
) -> list[asyncpg.Record]:
    """The sagas of a tenant in ``state`` (default: the parked ones), oldest change first."""
    states = [state] if state is not None else list(PARKED)
    return list(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM dap.sagas WHERE tenant_id = $1 AND state = ANY($2::text[]) "
            "ORDER BY updated_at, id LIMIT $3 OFFSET $4",
            tenant,
            states,
            limit,
            offset,
        )
    )


@dataclass(frozen=True)
class Finish:
    """A job's end as :func:`finish_job` writes it, for :func:`move` to write in its statement."""

    state: str  # succeeded / failed
    result: Any
    error: Any
    progress: float


# the job's end: finished_at is its transaction's start (now()), as for every job
_FINISH = (
    "UPDATE dap.jobs SET state = ${state}, result = ${result}::text::jsonb, error = ${error}::text::jsonb, "
    "finished_at = now(), progress = greatest(progress, ${progress}), "
    "callback_state = CASE WHEN callback_url IS NULL THEN NULL ELSE 'pending' END, callback_due = now() "
    "WHERE id = {id} AND worker = '" + OWNER + "'"
)


async def finish_job(
    conn: db.Connection, saga_id: uuid.UUID, state: str, result: Any, error: Any, progress: float
) -> None:
    """The saga's job row shows the saga's end (or its parking): ``succeeded`` / ``failed``."""
    await conn.execute(
        _FINISH.format(state=2, result=3, error=4, progress=5, id="$1"),
        saga_id,
        state,
        _json(result) if result is not None else None,
        _json(error) if error is not None else None,
        progress,
    )


async def reopen_job(conn: db.Connection, saga_id: uuid.UUID) -> None:
    """A parked saga a person sent on: its job is ``running`` again."""
    await conn.execute(
        "UPDATE dap.jobs SET state = 'running', error = NULL, finished_at = NULL, callback_state = NULL "
        "WHERE id = $1 AND worker = $2",
        saga_id,
        OWNER,
    )
