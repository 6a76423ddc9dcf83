"""``escalation.after``: the durable due time of a step, fired once by a loop in every server.

A step that declares ``escalation`` gets ``dap.approvals.escalate_at`` when it starts (in the
transaction that starts it). :func:`fire_due` claims the due rows with ``FOR UPDATE SKIP
LOCKED`` — so two servers never fire one row, and a row another transaction holds is left for
the next pass — and, in the same statement (one transaction), sets ``escalated_at`` (from then on
the step's ``escalation.to_roles`` may vote too), appends to the approval's history, writes the
audit row ``approval.escalated`` and, with ``notify``, the event ``approval.escalated`` in
``dap.outbox``.
A server killed before that commit leaves the row due: the next pass of any server fires it; one
killed after it never fires it again. So an escalation fires exactly once.

:class:`Loop` runs :func:`fire_due` every :data:`INTERVAL` seconds in the server process (started
and stopped with the application), and again at once while a pass finds a full batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from dap.server.storage import db
from dap.server.workflows import gates

log = logging.getLogger(__name__)
INTERVAL = 0.2  # seconds between passes: an escalation fires at most this late (plus its pass)
BATCH = 1000

# One statement per pass: claim the due rows (SKIP LOCKED), mark them fired, append the history
# entry, write one audit row each and, where the step's escalation notifies, the outbox event
# ``approval.escalated`` (the columns ``outbox.emit`` writes, set-based: a pass after a restart
# may find thousands due at once).
_FIRE = """
WITH due AS (
    SELECT tenant_id, id FROM dap.approvals
    WHERE status = 'pending' AND escalated_at IS NULL AND escalate_at <= now()
    ORDER BY escalate_at LIMIT $1 FOR UPDATE SKIP LOCKED
), fired AS (
    UPDATE dap.approvals a SET escalated_at = clock_timestamp(), updated_at = now(),
        history = a.history || jsonb_build_array(jsonb_build_object(
            'event', 'escalated', 'at', clock_timestamp(), 'step', a.step_name,
            'to_roles', to_jsonb(a.escalate_to)))
    FROM due WHERE a.tenant_id = due.tenant_id AND a.id = due.id
    RETURNING a.tenant_id, a.entity, a.record_id, a.escalate_notify, jsonb_build_object(
        'id', a.id::text, 'step', a.step_name, 'to_roles', to_jsonb(a.escalate_to),
        'due', a.escalate_at) AS detail
), audited AS (
    INSERT INTO dap.audit_log (tenant_id, entity, record_id, action, actor_sub, actor_username,
        version, changes)
    SELECT tenant_id, entity, record_id, 'approval.escalated', $2, $3, NULL,
        jsonb_build_object('approval', detail)
    FROM fired
    RETURNING 1
), notified AS (
    INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, actor_sub,
        actor_username)
    SELECT tenant_id, entity, record_id, 'approval', 'approval.escalated', detail, $2, $3
    FROM fired WHERE escalate_notify
    RETURNING 1
)
SELECT (SELECT count(*) FROM fired) AS fired, (SELECT count(*) FROM audited) AS audited,
    (SELECT count(*) FROM notified) AS notified,
    -- the dispatchers wake on one NOTIFY per transaction, as for every other emitted event
    (SELECT pg_notify('dap_outbox', txid_current()::text) WHERE EXISTS (SELECT 1 FROM notified))
"""


async def fire_due(conn: db.Connection, *, batch: int = BATCH) -> int:
    """Fire the escalations that are due (at most ``batch``), in one statement; how many fired."""
    found = await conn.fetchrow(_FIRE, batch, gates.SYSTEM_SUB, gates.SYSTEM_USERNAME)
    assert found is not None
    return int(found["fired"])


class Loop:
    """The escalation loop of one server process."""

    def __init__(self, pool: asyncpg.Pool, interval: float = INTERVAL) -> None:
        self._pool = pool
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dap-escalations")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            fired = 0
            try:
                async with db.connection(self._pool) as conn:
                    fired = await fire_due(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Postgres away, a pool closing: the next pass tries again
                log.warning("escalation pass failed", extra={"ctx": {"error": repr(exc)}})
            if fired < BATCH:
                await asyncio.sleep(self._interval)
