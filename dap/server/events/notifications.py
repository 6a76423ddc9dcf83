"""In-app notifications per user (written by the ``notification`` channel), read over REST."""

from __future__ import annotations

import uuid
from typing import Any

from dap.server.storage import db

LIST = (
    "SELECT public_id, event_id, entity, record_id, event, subject, body, created_at, read_at "
    "FROM dap.notifications WHERE tenant_id = $1 AND username = $2 AND ($3 OR read_at IS NULL) "
    "ORDER BY id DESC LIMIT $4"
)
READ = (
    "UPDATE dap.notifications SET read_at = now() WHERE tenant_id = $1 AND username = $2 "
    "AND public_id = ANY($3::uuid[]) AND read_at IS NULL"
)


def shown(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["public_id"]),
        "event_id": str(row["event_id"]),
        "entity": row["entity"],
        "record_id": str(row["record_id"]) if row["record_id"] else None,
        "event": row["event"],
        "subject": row["subject"],
        "body": row["body"],
        "created_at": row["created_at"].isoformat(),
        "read_at": row["read_at"].isoformat() if row["read_at"] else None,
    }


async def listing(
    conn: db.Connection, tenant: uuid.UUID, username: str, *, include_read: bool, limit: int
) -> list[dict[str, Any]]:
    return [shown(r) for r in await conn.fetch(LIST, tenant, username, include_read, limit)]


async def mark_read(conn: db.Connection, tenant: uuid.UUID, username: str, ids: list[uuid.UUID]) -> int:
    result = await conn.execute(READ, tenant, username, ids)
    return int(result.rsplit(" ", 1)[-1])
