"""``dap dev --auto-approve``: every approval gate of the workspace granted at once, saying so.

Production makes a gated transition wait for its approvers' votes. On a laptop that wait is a
chore when the flow under work is what comes after the approval, so with ``--auto-approve`` (off
by default: approval flows stay testable by hand) a loop watches ``dap.approvals`` and votes each
pending step to its quorum, through the same operation as ``POST /_approvals/{id}/approve``
(``workflows.approvals_flow.decide``): the record moves, the action's handler and events run as
they would, and every vote is an audit row by ``dap-dev-auto-approve-<n>`` with the comment
"auto-approved: dap dev --auto-approve". Each vote is also a line on the console and a log
record, so nobody mistakes it for a person's.

A step needing k approvers gets k votes by k distinct auto-approvers (one live vote per principal
and step is the rule), each holding the roles the step asks for plus ``admin`` (for a step's
``permission``). Polled every :data:`EVERY` seconds: a gated action's answer is still the 202 of
production, and the record moves a moment later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from dap import resource_pod
from dap.resource_pod import loading
from dap.server import errors as server_errors
from dap.server.access import auth
from dap.server.storage import db, workspaces
from dap.server.workflows import approvals_flow

log = logging.getLogger(__name__)

EVERY = 0.5  # seconds between looks at the pending approvals
VOTER = "dap-dev-auto-approve"
COMMENT = "auto-approved: dap dev --auto-approve"


def voter(index: int, roles: list[str]) -> auth.Principal:
    """The ``index``-th auto-approver of a step needing ``roles``. Pure."""
    return auth.Principal(sub=f"{VOTER}-{index}", username=f"{VOTER}-{index}", roles=(*roles, "admin"))


async def approve_pending(
    conn: db.Connection, catalog: Any, tenant: uuid.UUID, say: Callable[[str], None]
) -> int:
    """Vote every pending approval of ``tenant`` to its quorum, step by step; the votes cast."""
    cast = 0
    for _ in range(16):  # steps of one approval follow each other: look again until none is left
        pending = await conn.fetch(
            "SELECT id, entity, record_id, step_name, approvers, votes, roles FROM dap.approvals "
            "WHERE tenant_id = $1 AND status = 'pending' ORDER BY created_at",
            tenant,
        )
        if not pending:
            break
        for row in pending:
            for index in range(row["votes"], row["approvers"]):
                vote = approvals_flow.Vote(
                    catalog=catalog,
                    tenant=tenant,
                    approval_id=row["id"],
                    principal=voter(index + 1, list(row["roles"] or [])),
                    approve=True,
                    comment=COMMENT,
                    request_id=f"{VOTER}",
                )
                try:
                    decided = await approvals_flow.decide(conn, vote)
                except server_errors.ApiError as exc:  # e.g. the record moved meanwhile: said, skipped
                    say(f"auto-approve: {row['entity']} {row['record_id']}: {exc.detail}")
                    break
                cast += 1
                status = str(decided.approval.get("status"))
                done = f"; the approval is {status}" if status != "pending" else ""
                say(
                    f"auto-approve: {row['entity']} {row['record_id']} step {row['step_name']!r} "
                    f"approved by {vote.principal.username} (dev mode){done}"
                )
                log.warning(
                    "approval auto-approved in dev mode",
                    extra={
                        "ctx": {
                            "audit": "dev_auto_approve",
                            "approval": str(row["id"]),
                            "entity": row["entity"],
                            "record_id": str(row["record_id"]),
                            "step": row["step_name"],
                            "voter": vote.principal.username,
                        }
                    },
                )
                if status != "pending":
                    break
    return cast


async def run(dsn: str, slug: str, pod: resource_pod.Running, say: Callable[[str], None]) -> None:
    """Until cancelled: approve what waits in workspace ``slug`` of the pod's database."""
    say(f"auto-approve: approval gates of {slug!r} are granted at once (dap dev --auto-approve)")
    pool = await db.open_pool(dsn, 1)
    try:
        tenant: uuid.UUID | None = None
        while True:
            with contextlib.suppress(*db.UNREACHABLE):
                async with pool.acquire() as conn:
                    if tenant is None:
                        found = await workspaces.find(conn, slug)
                        tenant = found.tenant_id if found is not None else None
                    if tenant is not None:
                        await approve_pending(conn, loading.current(pod.server.app), tenant, say)
            await asyncio.sleep(EVERY)
    finally:
        await pool.close()
