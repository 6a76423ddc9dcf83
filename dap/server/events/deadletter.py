"""Dead deliveries: listing them and replaying one (served by the admin listener).

A replay puts a copy of the event back into ``dap.outbox`` -- same ``public_id`` (so a webhook
receiver sees the same ``webhook-id``), ``consumers`` naming only the dead delivery -- removes
that delivery's ``dead`` settlement and marks the dead-letter row ``replayed_at``, in one
transaction. The copy is a new, later row: it is delivered after the record's newer events (a
replay is the operator's decision to deliver late). An event kept for replay is never pruned.
"""

from __future__ import annotations

import uuid
from typing import Any

from dap.server import errors
from dap.server.storage import db

LIST = (
    "SELECT public_id, event_id, tenant_id, entity, event, consumer, channel, attempts, last_error, "
    "created_at, replayed_at FROM dap.dead_letter ORDER BY id DESC LIMIT $1"
)
COPY = """
INSERT INTO dap.outbox (public_id, tenant_id, entity, record_id, action, event, payload, actor_sub,
    actor_username, request_id, version, consumers, traceparent)
SELECT public_id, tenant_id, entity, record_id, action, event, payload, actor_sub, actor_username,
    request_id, version, ARRAY[$2::text], traceparent FROM dap.outbox WHERE id = $1
RETURNING id
"""


def shown(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["public_id"]),
        "event_id": str(row["event_id"]),
        "workspace_tenant": str(row["tenant_id"]),
        "entity": row["entity"],
        "event": row["event"],
        "consumer": row["consumer"],
        "channel": row["channel"],
        "attempts": row["attempts"],
        "last_error": row["last_error"],
        "created_at": row["created_at"].isoformat(),
        "replayed_at": row["replayed_at"].isoformat() if row["replayed_at"] else None,
    }


async def listing(conn: db.Connection, limit: int = 100) -> list[dict[str, Any]]:
    return [shown(r) for r in await conn.fetch(LIST, limit)]


async def replay(conn: db.Connection, dead_id: uuid.UUID) -> dict[str, Any]:
    """Replay one dead delivery (see the module's docstring); the dead-letter row after."""
    async with db.committed(conn):
        row = await conn.fetchrow("SELECT * FROM dap.dead_letter WHERE public_id = $1 FOR UPDATE", dead_id)
        if row is None:
            raise errors.NotFound("no such dead letter", code="SVC.EVENT.DEAD_LETTER_NOT_FOUND")
        if row["replayed_at"] is not None:
            raise errors.Conflict(
                "this dead letter was replayed already; a failed replay makes a new one",
                code="SVC.EVENT.ALREADY_REPLAYED",
            )
        copied = await conn.fetchval(COPY, row["outbox_id"], row["consumer"])
        if copied is None:
            raise errors.Conflict("the event of this dead letter is gone", code="SVC.EVENT.GONE")
        await conn.execute(
            "DELETE FROM dap.event_deliveries WHERE consumer = $1 AND event_id = $2",
            row["consumer"],
            row["settled_as"] or row["event_id"],  # the idempotency key's id, when one was declared
        )
        after = await conn.fetchrow(
            "UPDATE dap.dead_letter SET replayed_at = now() WHERE id = $1 RETURNING *", row["id"]
        )
        await conn.execute("SELECT pg_notify('dap_outbox', txid_current()::text)")
    return shown(after)
