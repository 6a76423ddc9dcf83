"""``escalation.after``: the durable due time of a step, fired once by a loop in every server.

A step that declares ``escalation`` gets ``dap.approvals.escalate_at`` when it starts (in the
transaction that starts it). :func:`fire_due` claims the due rows with ``FOR UPDATE SKIP
LOCKED`` — so two servers never fire one row, and a row another transaction holds is left for
the next pass — and, in the same transaction, sets ``escalated_at`` (from then on the step's
``escalation.to_roles`` may vote too), appends to the approval's history, writes the audit row
``approval.escalated`` and, with ``notify``, the event ``approval.escalated`` in ``dap.outbox``.
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
from dap.server.workflows import approvals, gates, outbox

log = logging.getLogger(__name__)
INTERVAL = 0.25  # seconds between passes: an escalation fires at most this late (plus its pass)
BATCH = 200

_CLAIM = (
    "SELECT tenant_id, id, entity, record_id, step_name, escalate_at, escalate_to "
    "FROM dap.approvals WHERE status = 'pending' AND escalated_at IS NULL AND escalate_at <= now() "
    "ORDER BY escalate_at LIMIT $1 FOR UPDATE SKIP LOCKED"
)
_FIRE = (
    "UPDATE dap.approvals SET escalated_at = clock_timestamp(), updated_at = now(), "
    "history = history || $3::jsonb WHERE tenant_id = $1 AND id = $2"
)
_AUDIT = (
    "INSERT INTO dap.audit_log (tenant_id, entity, record_id, action, actor_sub, actor_username, "
    "version, changes, request_id) VALUES ($1, $2, $3, 'approval.escalated', $4, $5, NULL, $6, NULL)"
)


async def fire_due(conn: db.Connection, *, batch: int = BATCH, notify: bool = True) -> int:
    """Fire the escalations that are due (at most ``batch``), in one transaction; how many fired."""
    async with conn.transaction():
        due = await conn.fetch(_CLAIM, batch)
        for row in due:
            detail = {
                "id": str(row["id"]),
                "step": row["step_name"],
                "to_roles": list(row["escalate_to"]),
                "due": row["escalate_at"].isoformat(),
            }
            entry = approvals.event("escalated", row["step_name"], to_roles=list(row["escalate_to"]))
            await conn.execute(_FIRE, row["tenant_id"], row["id"], [entry])
            await conn.execute(
                _AUDIT,
                row["tenant_id"],
                row["entity"],
                row["record_id"],
                gates.SYSTEM_SUB,
                gates.SYSTEM_USERNAME,
                {"approval": detail},
            )
            if notify:
                await outbox.emit(
                    conn,
                    tenant=row["tenant_id"],
                    entity=row["entity"],
                    record_id=row["record_id"],
                    action="approval",
                    event="approval.escalated",
                    payload=detail,
                    actor_sub=gates.SYSTEM_SUB,
                    actor_username=gates.SYSTEM_USERNAME,
                    request_id=None,
                )
    return len(due)


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
                async with self._pool.acquire() as conn:
                    fired = await fire_due(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Postgres away, a pool closing: the next pass tries again
                log.warning("escalation pass failed", extra={"ctx": {"error": repr(exc)}})
            if fired < BATCH:
                await asyncio.sleep(self._interval)
