"""``dap.outbox``: the events actions emit, written in the action's own transaction.

An action that declares ``emits`` inserts one row here before its transaction commits, so the
event exists exactly when the action's effect does (the transactional outbox pattern). Nothing
delivers these rows yet: the events part will read the undelivered rows in ``id`` order (the
partial index ``outbox_undelivered`` keeps that cheap), deliver them on their channels and set
``delivered_at``. Columns:

``id`` (bigserial, delivery order), ``public_id`` (uuid, the event's id for consumers),
``tenant_id``, ``entity`` (``module/name``), ``record_id`` (null for a service action), ``action``,
``event``, ``payload`` (jsonb: ``record`` after the action, ``params``, and ``from``/``to`` for a
transition), ``actor_sub``, ``actor_username``, ``request_id``, ``created_at``, ``delivered_at``
(null until delivered), ``attempts``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from dap.server.storage import db

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.outbox (
    id bigserial PRIMARY KEY,
    public_id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    entity text NOT NULL,
    record_id uuid,
    action text NOT NULL,
    event text NOT NULL,
    payload jsonb NOT NULL,
    actor_sub text,
    actor_username text,
    request_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_undelivered ON dap.outbox (id) WHERE delivered_at IS NULL;
"""
_INSERT = (
    "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, actor_sub, "
    "actor_username, request_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING public_id"
)


async def emit(
    conn: db.Connection,
    *,
    tenant: uuid.UUID,
    entity: str,
    record_id: uuid.UUID | None,
    action: str,
    event: str,
    payload: Mapping[str, Any],
    actor_sub: str,
    actor_username: str,
    request_id: str | None,
) -> uuid.UUID:
    """Insert one event in the caller's transaction; its public id."""
    found = await conn.fetchval(
        _INSERT,
        tenant,
        entity,
        record_id,
        action,
        event,
        dict(payload),
        actor_sub,
        actor_username,
        request_id,
    )
    assert isinstance(found, uuid.UUID)
    return found


async def ensure_schema(conn: db.Connection) -> None:
    await conn.execute(DDL)
