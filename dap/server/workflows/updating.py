"""An update of one record, whichever protocol asked for it: one rule set, one transaction's work.

A PATCH of fields and a file upload into a file field (``PUT …/_files/{field}``) are the same
verb: both change stored values of one record, so both go through :func:`update`: the caller's
row scope and ``If-Match``, draft-only for documents (``SVC.DOC.UPDATE_NOT_DRAFT``), relations,
derived values and guards, create-scope and backdate policy, the audit row, the cache
announcement, the child rows and the ``updated`` event in the outbox. Before any of that,
:func:`permitted` refuses a field the caller may not write (403, as ``guards.writable``), so an
upload is refused before its bytes are streamed.

It sits in ``workflows`` because the ``updated`` event is written by ``events.builtin``, a layer
above ``documents``; the adapters (``web.rest``, ``web.files``) decode, call it inside their
transaction and encode.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server import errors
from dap.server.access import guards
from dap.server.documents import auditing, filling, reading, writing
from dap.server.events import builtin
from dap.server.storage import caching, db, sql


@dataclass(frozen=True)
class Updated:
    """The record after the update, its child rows, and the ``updated`` event's public id."""

    row: asyncpg.Record
    children: dict[str, list[dict[str, Any]]] | None
    event: uuid.UUID | None


def permitted(access: guards.Access, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the caller may write it: 403 for a field whose permission the caller lacks."""
    return guards.writable(access, body)


def refuse_unless_draft(access: guards.Access, current: asyncpg.Record | Mapping[str, Any]) -> None:
    """409 ``SVC.DOC.UPDATE_NOT_DRAFT`` when ``current`` is a document past draft."""
    if access.resource.lifecycle and current["docstatus"] != 0:
        raise errors.Conflict("only draft documents can be updated", code="SVC.DOC.UPDATE_NOT_DRAFT")


async def update(
    conn: db.Connection,
    *,
    write: auditing.Write,
    access: guards.Access,
    record_id: uuid.UUID,
    body: dict[str, Any],
    values: dict[str, Any],
    expected: int | None,
) -> Updated:
    """Apply ``values`` (``body`` validated by ``writing.validate_body``) to one record, in the
    caller's transaction; raises the package's errors (the caller translates Postgres's)."""
    resource, tenant, principal = access.resource, write.tenant, access.principal
    current = await guards.select_for_write(
        conn, resource, tenant, record_id, principal=principal, expected=expected
    )
    refuse_unless_draft(access, current)
    await writing.check_relations(conn, resource, tenant, values)
    values = await filling.prepare_update(  # derived values over the merged record, guards
        conn, resource, tenant, principal, current, body, values
    )
    await guards.before_update(conn, access, tenant, current, values)  # scopes, dates
    columns, children = writing.split(resource, values)
    trail = await auditing.begin(conn, write, "update", current)
    row = await conn.fetchrow(
        *sql.flat(sql.update(resource.table, tenant, record_id, columns, expected_version=None))
    )
    assert row is not None
    await caching.announce(conn, resource, tenant, record_id)  # every process, at commit
    await writing.write_children(conn, resource, tenant, record_id, children)
    await trail.finish(conn, row)
    kids = None
    if resource.children:  # read before the commit: an answer never needs the connection after it
        kids = (await reading.load_children(conn, resource, tenant, [record_id], write.catalog)).get(
            record_id
        )
    event = await builtin.record(conn, write, "update", row, kids, changed=values.keys())
    return Updated(row, kids, event)
