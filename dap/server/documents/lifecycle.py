"""The document lifecycle: create-and-submit, submit and cancel moves, delete rules.

Entities with ``lifecycle: true`` move draft → submitted → cancelled; nothing moves back (a
cancelled document is a record of what was; a correction is a new document). The rules, each a
409 with a canonical ``SVC.DOC.*`` code (the full table is in docs/server.md):

- create makes a draft; ``POST …?submit=true`` creates and submits in one transaction where
  submit is open, else 409 ``SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE``; a body asking for
  ``docstatus: submitted`` gets that code too (the body never moves a state: a copied record must
  not arrive submitted);
- update only in draft (``UPDATE_NOT_DRAFT``, ``web.rest``); delete only in draft (``DELETE_NOT_DRAFT``);
- submit only from draft (``ALREADY_SUBMITTED`` twice, ``SUBMIT_NOT_DRAFT`` when cancelled);
- cancel only from submitted (``CANCEL_NOT_SUBMITTED`` from draft, ``ALREADY_CANCELLED`` twice);
- references (``references``): no cancel while a submitted document refers to it, no submit
  while it refers to a cancelled document, no delete while restricting relations or settled
  documents refer to it.

Submit and cancel are writes of the record, so they are open where the entity exposes ``update``
over REST and the action is not ``disabled``. Every move is one transaction on the row locked
``FOR UPDATE`` (read through :func:`guards.select_record`, like every lookup by id): two moves of
one document are serialised, and the second sees the first's result (:func:`move`; the route
``POST …/{id}/{action}`` is ``web.moves``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Resource
from dap.server.documents import auditing, filling, reading, references, summaries
from dap.server.storage import caching, db, tables

# what runs last in a move's transaction: (connection, row after, its child rows)
Moved = Callable[[db.Connection, asyncpg.Record, dict[str, list[dict[str, Any]]] | None], Awaitable[None]]

DRAFT, SUBMITTED, CANCELLED = 0, 1, 2
SUBMIT, CANCEL = "submit", "cancel"
# action -> (state required, state reached, code per wrong current state)
MOVES: dict[str, tuple[int, int, dict[int, str]]] = {
    SUBMIT: (
        DRAFT,
        SUBMITTED,
        {SUBMITTED: "SVC.DOC.ALREADY_SUBMITTED", CANCELLED: "SVC.DOC.SUBMIT_NOT_DRAFT"},
    ),
    CANCEL: (
        SUBMITTED,
        CANCELLED,
        {DRAFT: "SVC.DOC.CANCEL_NOT_SUBMITTED", CANCELLED: "SVC.DOC.ALREADY_CANCELLED"},
    ),
}
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0", ""})


def move_open(resource: Resource, action: str) -> bool:
    """Whether ``submit``/``cancel`` can be called on ``resource`` over REST."""
    declared = resource.spec.action(action)
    return (
        resource.lifecycle
        and action in MOVES
        and "update" in resource.actions
        and not (declared is not None and declared.disabled)
    )


def create_submits(resource: Resource, query: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    """Whether this create also submits (``?submit=true``); refuses what cannot be done. Pure.

    A body ``docstatus`` of ``submitted`` is refused with ``CREATE_SUBMIT_NOT_AVAILABLE`` before
    any validation (it is a request for a move, not a field); any other ``docstatus`` is a
    reserved field like ``id`` (422 ``SVC.DOC.RESERVED_FIELD``, from the validation).
    """
    text = query.get("submit")
    if text is not None and text.lower() not in _TRUE | _FALSE:
        raise errors.BadRequest(
            "submit must be true or false",
            code="SVC.QUERY.INVALID",
            errors=[errors.FieldProblem("submit", "must be true or false")],
        )
    wanted = text is not None and text.lower() in _TRUE
    asked = body.get("docstatus") in ("submitted", SUBMITTED)
    if not (wanted or asked):
        return False
    if not resource.lifecycle:
        why = f"{resource.key} has no lifecycle, so there is nothing to submit"
    elif not move_open(resource, SUBMIT):
        why = f"{resource.key} does not open submit over REST"
    elif asked:
        why = "create makes a draft; add ?submit=true to create and submit in one call"
    else:
        return True
    raise errors.Conflict(
        why,
        code="SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE",
        errors=[errors.FieldProblem("docstatus" if asked else "submit", why)],
    )


def initial_state(submitted: bool) -> dict[str, int]:
    """Extra column values of a create: ``docstatus`` when it starts submitted."""
    return {"docstatus": SUBMITTED} if submitted else {}


async def created(
    conn: db.Connection, write: auditing.Write, row: asyncpg.Record, *, submitted: bool
) -> None:
    """After the insert, in its transaction: the submit checks of a create-and-submit, the audit rows."""
    if submitted:
        await references.check_submit(conn, write.catalog, write.resource, write.tenant, row["id"])
        await summaries.apply(conn, write.catalog, write.resource, write.tenant, row["id"], 1)
    await (await auditing.begin(conn, write, "create", None)).finish(conn, row)
    if submitted and auditing.recorded(write.resource, SUBMIT) is not None:
        await auditing.record(
            conn,
            write,
            record_id=row["id"],
            action=SUBMIT,
            version=row["version"],
            changes={"docstatus": [tables.DOCSTATUS[DRAFT], tables.DOCSTATUS[SUBMITTED]]},
        )


def check_delete(resource: Resource, current: asyncpg.Record) -> None:
    """Only drafts (and records of entities without a lifecycle) can be deleted."""
    if resource.lifecycle and current["docstatus"] != DRAFT:
        now = tables.DOCSTATUS[current["docstatus"]]
        raise errors.Conflict(
            f"a {now} document cannot be deleted; only drafts can (a cancelled document stays as a record)",
            code="SVC.DOC.DELETE_NOT_DRAFT",
        )


async def move(
    conn: db.Connection,
    write: auditing.Write,
    principal: auth.Principal,
    action: str,
    record_id: uuid.UUID,
    *,
    expected: int | None,
    after: Moved | None = None,
) -> tuple[asyncpg.Record, dict[str, list[dict[str, Any]]] | None]:
    """Submit or cancel one document: one transaction on its row locked ``FOR UPDATE``; the row after
    and its child rows (read before the commit).

    ``expected`` is the version the caller read (``If-Match``), checked under the lock; ``after``
    runs last in the transaction with the row after and its child rows (the events part records
    the move's built-in event there).
    """
    required, reached, wrong = MOVES[action]
    catalog, resource, tenant = write.catalog, write.resource, write.tenant
    table = tables.quote(resource.table.name)
    try:
        async with db.committed(conn):
            current = await guards.select_for_write(
                conn, resource, tenant, record_id, principal=principal, expected=expected
            )
            if current["docstatus"] != required:
                now = tables.DOCSTATUS[current["docstatus"]]
                raise errors.Conflict(f"cannot {action} a {now} document", code=wrong[current["docstatus"]])
            await filling.check_action(conn, resource, tenant, principal, current, action)  # guards
            await guards.check_period(conn, resource, tenant, principal, current)  # a closed period
            if action == SUBMIT:
                await references.check_submit(conn, catalog, resource, tenant, record_id)
            else:
                await references.check_cancel(conn, catalog, resource, tenant, record_id)
            trail = await auditing.begin(conn, write, action, current)
            row = await conn.fetchrow(
                f"UPDATE {table} SET docstatus = $3, version = version + 1, updated_at = now() "
                f"WHERE tenant_id = $1 AND id = $2 RETURNING {resource.table.select_columns}",
                tenant,
                record_id,
                reached,
            )
            assert row is not None
            await summaries.apply(conn, catalog, resource, tenant, record_id, 1 if action == SUBMIT else -1)
            await caching.announce(conn, resource, tenant, record_id)  # every process, at commit
            await trail.finish(conn, row)
            kids = (
                await reading.load_children(conn, resource, tenant, [record_id], catalog)
                if resource.children
                else {}
            )
            if after is not None:
                await after(conn, row, kids.get(record_id))
    except asyncpg.DeadlockDetectedError as exc:
        raise errors.Conflict(
            "another move on related documents ran at the same time; try again",
            code="SVC.DOC.CONCURRENT_MOVE",
        ) from exc
    return row, kids.get(record_id)
