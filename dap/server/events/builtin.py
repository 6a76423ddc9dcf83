"""The built-in events of the standard actions, written in the transaction of the write.

Every standard write of an entity emits one event into ``dap.outbox`` (docs/events.md has the
payloads):

==========  ==========  =====================================================================
action      event       payload
==========  ==========  =====================================================================
create      created     ``record`` (the record after the insert, as REST shows it)
update      updated     ``record`` (after), ``changed`` (the names of the fields the body set)
delete      deleted     ``record`` (the record as it was before the delete)
submit      submitted   ``record`` (after: ``docstatus`` submitted)
cancel      cancelled   ``record`` (after: ``docstatus`` cancelled)
==========  ==========  =====================================================================

A create-and-submit emits ``created`` only (its record reads ``docstatus: submitted``). An entity
may declare an event of one of these names in ``spec.events`` to give it ``deliver`` entries or a
``type``; undeclared, the built-in event is still written (websocket subscribers and ``pubsub``
see every change) and is ``async``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg

from dap.server.documents import auditing, reading
from dap.server.events import outbox
from dap.server.storage import db

NAMES = {
    "create": "created",
    "update": "updated",
    "delete": "deleted",
    "submit": "submitted",
    "cancel": "cancelled",
}


def payload(
    write: auditing.Write,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None,
    changed: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The payload of a built-in event (pure)."""
    out: dict[str, Any] = {"record": reading.present(write.resource, row, children)}
    if changed is not None:
        out["changed"] = sorted(changed)
    return out


async def record(
    conn: db.Connection,
    write: auditing.Write,
    action: str,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None = None,
    *,
    changed: Iterable[str] | None = None,
) -> uuid.UUID:
    """Emit the built-in event of ``action`` on ``row`` in the caller's transaction; its public id.

    ``row`` is the record after the write (before it, for ``delete``).
    """
    body = payload(write, row, children, changed)
    return await outbox.emit(
        conn,
        tenant=write.tenant,
        entity=write.resource.key,
        record_id=row["id"],
        action=action,
        event=NAMES[action],
        payload=body,
        actor_sub=write.sub,
        actor_username=write.username,
        request_id=write.request_id,
        version=row["version"],
    )
