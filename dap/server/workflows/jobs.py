"""``dap.jobs``: actions declared ``call: async`` run in the background, tracked and resumable.

A request of such an action is checked as a synchronous call would be up to the point where it
would run (permission, params, rate limit, the record's row scope, the callback URL), then one row
is inserted here (:func:`enqueue`, in the transaction that stores the ``Idempotency-Key``'s
answer) and the caller gets 202 with the job. The worker loop of every server process
(``workflows.worker``) claims queued rows with ``FOR UPDATE SKIP LOCKED`` (:func:`claim`), holds a
lease it extends while the action runs (:func:`heartbeat`), and finishes the row in the same
transaction as the action's effect (:func:`succeed`, only while it still holds the lease), so the
effect and ``succeeded`` commit together. A process killed mid-run leaves a ``running`` row whose
lease runs out: the next claim takes it again and runs it from the start (its uncommitted work
was rolled back with its connection; ``lost`` counts such leases); the :data:`MAX_LOST`-th lost
lease makes :func:`expire` fail it instead. A process that stops gracefully hands its running
jobs back at once (:func:`release`: queued again, not counted as lost), so a restart neither
delays them by a lease nor brings them closer to failing.
No row stays ``running`` past its lease.

States: ``queued`` → ``running`` → ``succeeded`` | ``failed``. ``progress`` (0 to 100) only goes up
(``greatest`` in :func:`report`, written on its own connection so readers see it while the action
runs). ``result`` is the answer the synchronous call would have given; ``error`` its problem
document. A callback, when asked for, is delivered after the job finishes (``callback_*``
columns, ``workflows.callbacks``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap import tracing
from dap.server import fieldvalues
from dap.server.storage import db

# a job's row as fetched, or as a dict when split from a larger statement's row
Row = asyncpg.Record | Mapping[str, Any]
MAX_LOST = 3  # leases of one job that may run out (its worker gone); the last one fails it
DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.jobs (
    id uuid PRIMARY KEY,
    tenant_id uuid NOT NULL,
    target text NOT NULL,
    kind text NOT NULL,
    action text NOT NULL,
    record_id uuid,
    principal jsonb NOT NULL,
    body text NOT NULL,
    expected bigint,
    request_id text,
    state text NOT NULL DEFAULT 'queued',
    progress real NOT NULL DEFAULT 0,
    result jsonb,
    error jsonb,
    runs integer NOT NULL DEFAULT 0,
    lost integer NOT NULL DEFAULT 0,
    worker text,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    callback_url text,
    callback_sign boolean NOT NULL DEFAULT false,
    callback_retry jsonb,
    callback_state text,
    callback_attempts integer NOT NULL DEFAULT 0,
    callback_due timestamptz,
    callback_error text
);
ALTER TABLE dap.jobs ADD COLUMN IF NOT EXISTS lost integer NOT NULL DEFAULT 0;
-- the W3C traceparent of the span that queued the job (NULL: tracing off): its run joins that trace
ALTER TABLE dap.jobs ADD COLUMN IF NOT EXISTS traceparent text;
CREATE INDEX IF NOT EXISTS jobs_open ON dap.jobs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS jobs_callbacks ON dap.jobs (callback_due) WHERE callback_state = 'pending';
"""
COLUMNS = (
    "id, tenant_id, target, kind, action, record_id, principal, body, expected, request_id, state, "
    "progress, result, error, runs, created_at, started_at, finished_at, callback_url, callback_sign, "
    "callback_retry, callback_state, callback_attempts, callback_error, traceparent"
)
_CLAIM = f"""
UPDATE dap.jobs SET state = 'running', runs = runs + 1, worker = $1,
    lost = lost + CASE WHEN state = 'running' THEN 1 ELSE 0 END,
    lease_until = now() + make_interval(secs => $2), started_at = coalesce(started_at, now())
WHERE id = (
    SELECT id FROM dap.jobs
    WHERE state = 'queued' OR (state = 'running' AND lease_until < now() AND lost + 1 < {MAX_LOST})
    ORDER BY created_at FOR UPDATE SKIP LOCKED LIMIT 1
)
RETURNING {COLUMNS}
"""
_EXPIRE = f"""
UPDATE dap.jobs SET state = 'failed', finished_at = now(), worker = NULL, error = $1, lost = lost + 1,
    callback_state = CASE WHEN callback_url IS NULL THEN NULL ELSE 'pending' END, callback_due = now()
WHERE id IN (
    SELECT id FROM dap.jobs WHERE state = 'running' AND lease_until < now() AND lost + 1 >= {MAX_LOST}
    FOR UPDATE SKIP LOCKED
)
"""
_FINISH = """
UPDATE dap.jobs SET state = $3, result = $4, error = $5, finished_at = now(), worker = NULL,
    progress = CASE WHEN $3 = 'succeeded' THEN 100 ELSE progress END,
    callback_state = CASE WHEN callback_url IS NULL THEN NULL ELSE 'pending' END, callback_due = now()
WHERE id = $1 AND worker = $2 AND state = 'running'
"""


@dataclass(frozen=True)
class Job:
    row: Row

    @property
    def id(self) -> uuid.UUID:
        found: uuid.UUID = self.row["id"]
        return found

    @property
    def principal(self) -> dict[str, Any]:
        found: dict[str, Any] = self.row["principal"]
        return found

    def view(self) -> dict[str, Any]:
        """The job as ``GET …/_jobs/{id}`` and a callback show it."""
        r = self.row
        out: dict[str, Any] = {
            "id": str(r["id"]),
            "state": r["state"],
            "progress": r["progress"],
            "action": r["action"],
            "target": r["target"],
            "record_id": str(r["record_id"]) if r["record_id"] is not None else None,
            "created_at": _iso(r["created_at"]),
            "started_at": _iso(r["started_at"]),
            "finished_at": _iso(r["finished_at"]),
            "runs": r["runs"],
        }
        if r["state"] == "succeeded":
            out["result"] = r["result"]
        if r["state"] == "failed":
            out["error"] = r["error"]
        if r["callback_url"] is not None:
            out["callback"] = {
                "state": r["callback_state"] or "waiting",
                "attempts": r["callback_attempts"],
                "error": r["callback_error"],
            }
        return out


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True)
class New:
    """A job to insert."""

    id: uuid.UUID
    tenant: uuid.UUID
    target: str  # module/name
    kind: str  # "entity" or "service"
    action: str
    record_id: uuid.UUID | None
    principal: dict[str, Any]
    body: str  # the params as sent (JSON text; numbers exact)
    expected: int | None
    request_id: str | None
    callback_url: str | None = None
    callback_sign: bool = False
    callback_retry: dict[str, Any] | None = None


# the columns a new job is inserted with, in the order of :func:`values` ($1 to $14)
INSERTED = (
    "id, tenant_id, target, kind, action, record_id, principal, body, expected, "
    "request_id, callback_url, callback_sign, callback_retry, traceparent"
)


def values(new: New) -> tuple[Any, ...]:
    """The arguments of :data:`INSERTED` for ``new`` (``saga_store.accept`` inserts with them too)."""
    return (
        new.id,
        new.tenant,
        new.target,
        new.kind,
        new.action,
        new.record_id,
        new.principal,
        new.body,
        new.expected,
        new.request_id,
        new.callback_url,
        new.callback_sign,
        new.callback_retry,
        tracing.traceparent(),
    )


async def enqueue(conn: db.Connection, new: New) -> Job:
    row = await conn.fetchrow(
        f"INSERT INTO dap.jobs ({INSERTED}) "
        f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING {COLUMNS}",
        *values(new),
    )
    assert row is not None
    return Job(row)


async def find(conn: db.Connection, tenant: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.jobs WHERE id = $1 AND tenant_id = $2", job_id, tenant
    )
    return Job(row) if row is not None else None


async def claim(conn: db.Connection, worker: str, lease: float) -> Job | None:
    """Take the oldest queued job, or a running one whose lease ran out; ``None`` when there is none."""
    row = await conn.fetchrow(_CLAIM, worker, lease)
    return Job(row) if row is not None else None


async def expire(conn: db.Connection) -> int:
    """Fail the jobs whose lease ran out for the :data:`MAX_LOST`-th time; how many."""
    problem = {
        "status": 500,
        "code": "SVC.JOB.WORKER_LOST",
        "detail": f"the server process running this job stopped {MAX_LOST} times before it finished; "
        "nothing of it was committed",
    }
    done = await conn.execute(_EXPIRE, problem)
    return int(done.rsplit(" ", 1)[-1])


async def release(conn: db.Connection, worker: str) -> int:
    """Queue again the jobs ``worker`` is running (it is stopping and rolled them back); how many."""
    done = await conn.execute(
        "UPDATE dap.jobs SET state = 'queued', worker = NULL, lease_until = NULL "
        "WHERE worker = $1 AND state = 'running'",
        worker,
    )
    return int(done.rsplit(" ", 1)[-1])


async def heartbeat(conn: db.Connection, job_id: uuid.UUID, worker: str, lease: float) -> bool:
    """Extend the lease; ``False`` when this worker no longer holds the job."""
    done = await conn.execute(
        "UPDATE dap.jobs SET lease_until = now() + make_interval(secs => $3) "
        "WHERE id = $1 AND worker = $2 AND state = 'running'",
        job_id,
        worker,
        lease,
    )
    return done.endswith(" 1")


async def report(conn: db.Connection, job_id: uuid.UUID, worker: str, progress: float) -> None:
    """Raise the job's progress (never lowers it)."""
    await conn.execute(
        "UPDATE dap.jobs SET progress = greatest(progress, $3) "
        "WHERE id = $1 AND worker = $2 AND state = 'running'",
        job_id,
        worker,
        progress,
    )


async def succeed(conn: db.Connection, job_id: uuid.UUID, worker: str, result: Any) -> bool:
    """Mark the job done with ``result`` (in the action's transaction); ``False`` if the lease was lost."""
    done = await conn.execute(_FINISH, job_id, worker, "succeeded", result, None)
    return done.endswith(" 1")


async def fail(conn: db.Connection, job_id: uuid.UUID, worker: str, problem: dict[str, Any]) -> bool:
    done = await conn.execute(_FINISH, job_id, worker, "failed", None, problem)
    return done.endswith(" 1")


# --- callbacks -------------------------------------------------------------------------------

_CLAIM_CALLBACK = f"""
UPDATE dap.jobs SET callback_due = now() + make_interval(secs => $1)
WHERE id = (
    SELECT id FROM dap.jobs WHERE callback_state = 'pending' AND callback_due <= now()
    ORDER BY callback_due FOR UPDATE SKIP LOCKED LIMIT 1
)
RETURNING {COLUMNS}
"""


async def claim_callback(conn: db.Connection, hold: float) -> Job | None:
    """A finished job whose callback is due, held for ``hold`` seconds (its delivery's lease)."""
    row = await conn.fetchrow(_CLAIM_CALLBACK, hold)
    return Job(row) if row is not None else None


async def callback_done(
    conn: db.Connection, job_id: uuid.UUID, error: str | None, retry_in: float | None
) -> None:
    """Record one delivery: delivered (``error`` None), retried in ``retry_in`` s, or failed for good."""
    state = "delivered" if error is None else ("pending" if retry_in is not None else "failed")
    await conn.execute(
        "UPDATE dap.jobs SET callback_state = $2, callback_attempts = callback_attempts + 1, "
        "callback_error = $3, callback_due = now() + make_interval(secs => $4) WHERE id = $1",
        job_id,
        state,
        error,
        retry_in or 0.0,
    )


def body_of(job: Job) -> str:
    return str(job.row["body"])


def decode(text: str) -> dict[str, Any]:
    found: dict[str, Any] = fieldvalues.exact_json(text) if text else {}
    return found


async def depth(conn: db.Connection) -> tuple[int, int]:
    """(queued, running) jobs of every tenant: the metrics' job queue depth (index ``jobs_open``)."""
    rows = await conn.fetch(
        "SELECT state, count(*) AS n FROM dap.jobs WHERE state IN ('queued', 'running') GROUP BY state"
    )
    found = {r["state"]: r["n"] for r in rows}
    return found.get("queued", 0), found.get("running", 0)


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)
