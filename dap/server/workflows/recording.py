"""A record's create and update, protocol-neutral: the one pipeline every caller of these verbs runs.

REST (``web.rest``), file uploads (``web.files``: an upload is an update of its field) and the
seed loader (``workflows.seeding``) all write records through here,
so a rule of creating or updating -- relations, derived values and natural keys, row and create
scope, backdating, children, the document lifecycle, the audit trail, the built-in event -- is
written once (ARCHITECTURE.md, "Protocols are adapters"). Each function runs inside the caller's
transaction and opens none: a request commits one record, a seed run commits all of its records
together. A caller may defer that transaction (``storage.deferred``, as ``operations`` does):
a create or update that needs nothing but its own statement then sends it alone, committed by
itself (docs/decisions.md, "One statement per write"). What stays with the caller is what
belongs to its protocol: decoding the body, the permission check that yields ``access``, the
``Idempotency-Key``, the answer and its delivery.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import asyncpg

from dap.server import errors
from dap.server.access import auth, guards, periods
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, filling, lifecycle, reading, writing
from dap.server.events import builtin, outbox
from dap.server.storage import caching, db, deferred, sql

Children = dict[str, list[dict[str, Any]]] | None
log = logging.getLogger(__name__)


@dataclass(slots=True)  # made per write, never assigned to: see operations.Call
class Written:
    """A record after its write: the row, its child rows (read in the transaction) and the built-in
    event's public id in the outbox. ``record`` is the row as REST presents it (all fields) when
    the write already presented it for its event: an answer reuses it (``present`` once per write)."""

    row: asyncpg.Record
    children: Children
    event: uuid.UUID
    record: dict[str, Any] | None = None

    def presented(self, resource: Resource) -> dict[str, Any]:
        """The record as REST presents it (all fields; the caller's view narrows it)."""
        if self.record is not None:
            return self.record
        return reading.present(resource, self.row, self.children)


def refuse_unless_draft(access: guards.Access, current: asyncpg.Record | Mapping[str, Any]) -> None:
    """409 ``SVC.DOC.UPDATE_NOT_DRAFT`` when ``current`` is a document past draft."""
    if access.resource.lifecycle and current["docstatus"] != 0:
        raise errors.Conflict("only draft documents can be updated", code="SVC.DOC.UPDATE_NOT_DRAFT")


async def children_of(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID, catalog: Catalog
) -> Children:
    """The child rows of one record, read in the write's transaction (before its commit, so that an
    answer never needs the connection after it: see ``db``)."""
    if not resource.children:
        return None
    return (await reading.load_children(conn, resource, tenant, [record_id], catalog)).get(record_id)


async def create(
    conn: db.Connection,
    write: auditing.Write,
    access: guards.Access,
    body: Mapping[str, Any],
    values: dict[str, Any],
    *,
    submit: bool,
    notify: bool = True,
) -> Written:
    """Insert one record (submitted at once when ``submit``) in the caller's transaction.

    ``body`` is the decoded input after ``guards.writable``; ``values`` its validation
    (``writing.validate_body``). Raises the package's errors (422, 403, 409) before or after the
    insert; the caller's transaction then undoes it. ``notify`` ``False``: the caller wakes its
    process's dispatcher after the commit itself (``builtin.joined``). A transaction entity's
    accounting period is checked inside the ``INSERT`` itself (``periods.fold``): its refusal
    comes back from Postgres and leaves here as 422 ``SVC.PERIOD.CLOSED``.
    """
    try:
        return await _create(conn, write, access, body, values, submit=submit, notify=notify)
    except asyncpg.PostgresError as exc:
        field = access.policy.period_field
        refused = periods.refusal(exc, field) if field is not None else None
        if refused is None:
            raise
        raise refused from exc


def _period_folded(access: guards.Access, statement: str, columns: Mapping[str, Any]) -> str:
    """The ``INSERT`` with the accounting-period check of its transaction date folded in."""
    field = access.policy.period_field
    resource = access.resource
    column = resource.column(field) if field is not None else None
    declared = resource.table.column(column) if column is not None else None
    if declared is None or column not in columns:
        return statement
    place = sql.insert_places(columns)[declared.name]
    may = access.allows(periods.POST_CLOSING)
    return periods.fold(statement, place, declared.sql_type, may_post_closing=may)


async def _create(
    conn: db.Connection,
    write: auditing.Write,
    access: guards.Access,
    body: Mapping[str, Any],
    values: dict[str, Any],
    *,
    submit: bool,
    notify: bool,
) -> Written:
    resource, tenant, catalog = write.resource, write.tenant, write.catalog
    principal = access.principal
    await writing.check_relations(conn, resource, tenant, values)
    values = await filling.prepare_create(  # derived values, natural keys, guards
        conn, resource, tenant, principal, body, values, submitting=submit
    )
    await guards.before_create(conn, access, tenant, values)  # scopes, dates
    columns, children = writing.split(resource, values)
    columns.update(lifecycle.initial_state(submit))
    statement, args = sql.insert(resource.table, tenant, columns, owner=principal.username)
    statement = _period_folded(access, statement, columns)
    record = builtin.rendering(resource)
    if record is not None:  # the row and its event, its record written from the row: one statement
        text, params = builtin.written(statement, args, write, "create", record, notify=notify)
        if alone_possible(conn, write, submit):  # nothing before it, nothing after it
            row = await conn.alone(text, *params)
            assert row is not None
        else:
            row = await conn.fetchrow(text, *params)
            assert row is not None
            await lifecycle.created(conn, write, row, submitted=submit)
        return Written(row, None, builtin.event_of(row))
    if not resource.children:  # the row and its event in one statement (``builtin.joined``)
        predicted: dict[str, Any] = {c.name: None for c in resource.table.columns}
        predicted.update(docstatus=lifecycle.DRAFT)  # the column's default (a submit sets it)
        predicted.update(columns, owner=principal.username, created_by=principal.username)
        if alone_possible(conn, write, submit):
            check = builtin.matching(resource, predicted, sql.insert_places(columns), len(args) + 9)
            done = await _create_alone(conn, write, statement, args, predicted, check, notify)
            if done is not None:
                return done
        joined = builtin.joined(statement, args, write, "create", predicted, notify=notify)
        row = await conn.fetchrow(joined.sql, *joined.args)
        assert row is not None
        settled = await builtin.settle_joined(conn, write, joined, row)
        await lifecycle.created(conn, write, row, submitted=submit)
        return Written(row, None, settled.event, settled.record)
    row = await conn.fetchrow(statement, *args)
    assert row is not None
    await writing.write_children(conn, resource, tenant, row["id"], children)
    await lifecycle.created(conn, write, row, submitted=submit)
    kids = await children_of(conn, resource, tenant, row["id"], catalog)
    event = await builtin.record(conn, write, "create", row, kids)
    return Written(row, kids, event)


def alone_possible(conn: db.Connection, write: auditing.Write, submit: bool) -> TypeGuard[deferred.Deferred]:
    """A create can be one statement committed by itself (``deferred``): its caller deferred the
    transaction, nothing has been sent yet, and nothing follows the insert (a create-and-submit
    checks references, an audited create writes its audit row)."""
    return (
        isinstance(conn, deferred.Deferred)
        and conn.pristine
        and not submit
        and auditing.recorded(write.resource, "create") is None
    )


async def _create_alone(
    conn: deferred.Deferred,
    write: auditing.Write,
    statement: str,
    args: list[Any],
    predicted: dict[str, Any],
    check: builtin.Check,
    notify: bool,
) -> Written | None:
    """The row and its event in one statement committed by itself: one round trip instead of
    ``BEGIN``, the statement and ``COMMIT``. ``None`` when the row would have come out otherwise
    than predicted (a column default, a trigger): the statement refused it and wrote nothing, and
    the caller takes the transaction path, whose event is rewritten to the row as it is."""
    joined = builtin.joined(statement, args, write, "create", predicted, notify=notify, check=check)
    try:
        row = await conn.alone(joined.sql, *joined.args)
    except asyncpg.PostgresError as exc:
        if builtin.refused(exc):
            return None
        raise
    assert row is not None
    settled, actual = builtin.compared(write, joined, row)
    if actual is not None:  # ``matching`` is stricter than this comparison: not expected
        log.warning(
            "event payload rewritten after a lone create: the check in SQL let a difference through",
            extra={"ctx": {"event": str(settled.event)}},
        )
        await conn.alone(outbox.rewrite_sql(), actual, settled.event)
    return Written(row, None, settled.event, settled.record)


async def update(
    conn: db.Connection,
    write: auditing.Write,
    access: guards.Access,
    record_id: uuid.UUID,
    body: Mapping[str, Any],
    values: dict[str, Any],
    *,
    expected: int | None,
    notify: bool = True,
) -> Written:
    """Update one record (drafts only, for documents) in the caller's transaction.

    The row is locked ``FOR UPDATE`` through ``guards.select_for_write`` (row scope, ``expected``
    version); 409 ``SVC.DOC.UPDATE_NOT_DRAFT`` for a submitted or cancelled document. ``notify``:
    as for :func:`create`. On a deferred connection an update that needs nothing of the record
    is one statement (:func:`_update_blind`), else one that needs only a read reads unlocked
    (:func:`_update_optimistic`); either falls back to the locked path when it wrote nothing.
    """
    resource, tenant, catalog = write.resource, write.tenant, write.catalog
    principal: auth.Principal = access.principal
    if blind_possible(conn, write, access, values):
        done = await _update_blind(conn, write, access, record_id, values, expected, notify)
        if done is not None:
            return done
    elif optimistic_possible(conn, write):
        done = await _update_optimistic(conn, write, access, record_id, body, values, expected, notify)
        if done is not None:
            return done
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
    statement, args = sql.update(resource.table, tenant, record_id, columns, expected_version=None)
    if not resource.children:  # the row and its event in one statement (``builtin.joined``)
        joined = builtin.joined(
            statement, args, write, "update", {**current, **columns}, changed=values.keys(), notify=notify
        )
        row = await conn.fetchrow(joined.sql, *joined.args)
        assert row is not None
        settled = await builtin.settle_joined(conn, write, joined, row, changed=values.keys())
        await caching.announce(conn, resource, tenant, record_id)  # every process, at commit
        await trail.finish(conn, row)
        return Written(row, None, settled.event, settled.record)
    row = await conn.fetchrow(statement, *args)
    assert row is not None
    await caching.announce(conn, resource, tenant, record_id)  # every process, at commit
    await writing.write_children(conn, resource, tenant, record_id, children)
    await trail.finish(conn, row)
    kids = await children_of(conn, resource, tenant, record_id, catalog)
    event = await builtin.record(conn, write, "update", row, kids, changed=values.keys())
    return Written(row, kids, event)


def blind_possible(
    conn: db.Connection, write: auditing.Write, access: guards.Access, values: Mapping[str, Any]
) -> TypeGuard[deferred.Deferred]:
    """An update can be one statement that reads nothing first (:func:`_update_blind`): what
    :func:`optimistic_possible` asks, and nothing of the update needs the record as it is -- no
    derived values or declared conditions (``filling``), no row scope, no create scope or
    backdating rule on a field it sets (``guards.before_update``) -- and the statement can write
    the event's record from the row itself (``builtin.rendering``)."""
    if not optimistic_possible(conn, write):
        return False
    resource, policy = write.resource, access.policy
    cs = policy.create_scope
    return (
        not resource.derivation.active
        and not access.scope
        and (cs is None or (cs.field not in values and cs.ref_field not in values))
        and (policy.date_field is None or policy.date_field not in values)
        and policy.period_field is None  # its period is judged on the stored date
        and builtin.rendering(resource) is not None
    )


async def _update_blind(
    conn: deferred.Deferred,
    write: auditing.Write,
    access: guards.Access,
    record_id: uuid.UUID,
    values: dict[str, Any],
    expected: int | None,
    notify: bool,
) -> Written | None:
    """An update in one round trip: the row and its event in one statement committed by itself,
    whose ``WHERE`` holds what the locked path would have checked on the row it read (the
    ``If-Match`` version, a document still a draft) and whose event's record is written from the
    row (``builtin.written``). A relation's check, when the body sets one, sends its statement
    first, and the update then commits with it.

    ``None`` when the statement wrote nothing (no such record, another version, not a draft) or a
    relation pointed nowhere: nothing is written, the transaction (if any) is rolled back, and the
    caller takes the locked path, which answers 404, 412, 409 or 422 in its own order."""
    resource, tenant = write.resource, write.tenant
    try:
        await writing.check_relations(conn, resource, tenant, values)
    except errors.ValidationFailed:
        await conn.abandon()
        return None
    columns, _ = writing.split(resource, values)
    statement, args = sql.update(
        resource.table, tenant, record_id, columns, expected_version=expected, draft_only=resource.lifecycle
    )
    record = builtin.rendering(resource)
    assert record is not None
    text, params = builtin.written(
        statement, args, write, "update", record, changed=values.keys(), notify=notify
    )
    row = await conn.fetchrow(text, *params) if conn.begun else await conn.alone(text, *params)
    if row is None:  # nothing written: the locked path, from the start
        await conn.abandon()
        conn.undone()
        return None
    return Written(row, None, builtin.event_of(row))


def optimistic_possible(conn: db.Connection, write: auditing.Write) -> TypeGuard[deferred.Deferred]:
    """An update can read its record unlocked and write it with its event in one statement that
    checks the version it read (``deferred``): its caller deferred the transaction, nothing has
    been sent yet, and nothing else needs the record locked (no child rows, no cache to announce
    to, no audited field whose trail compares before and after)."""
    resource = write.resource
    return (
        isinstance(conn, deferred.Deferred)
        and conn.pristine
        and not resource.children
        and resource.cache_ttl is None
        and auditing.recorded(resource, "update") is None
    )


async def _update_optimistic(
    conn: deferred.Deferred,
    write: auditing.Write,
    access: guards.Access,
    record_id: uuid.UUID,
    body: Mapping[str, Any],
    values: dict[str, Any],
    expected: int | None,
    notify: bool,
) -> Written | None:
    """An update in two round trips instead of four: the record read unlocked (404, 412 and the
    draft rule as ever), then the row and its event in one statement whose ``WHERE`` holds the
    version read -- committed by itself unless a step in between needed the transaction (a
    relation's ``FOR KEY SHARE``), in which case it commits with it.

    ``None`` when the statement wrote nothing: another write came between the read and the
    statement (the version moved), or the row would have come out otherwise than predicted (the
    check refused it). The transaction is then rolled back and the caller takes the locked path,
    which waits for the other write and answers as it always did."""
    resource, tenant, principal = write.resource, write.tenant, access.principal
    with conn.unlocked():
        current = await guards.select_for_write(
            conn, resource, tenant, record_id, principal=principal, expected=expected, lock=False
        )
    refuse_unless_draft(access, current)
    await writing.check_relations(conn, resource, tenant, values)
    values = await filling.prepare_update(conn, resource, tenant, principal, current, body, values)
    await guards.before_update(conn, access, tenant, current, values)
    columns, _ = writing.split(resource, values)
    statement, args = sql.update(
        resource.table, tenant, record_id, columns, expected_version=current["version"]
    )
    predicted = {**current, **columns}
    check = builtin.matching(resource, predicted, sql.update_places(columns), len(args) + 9)
    joined = builtin.joined(
        statement, args, write, "update", predicted, changed=values.keys(), notify=notify, check=check
    )
    try:
        if conn.begun:
            row = await conn.fetchrow(joined.sql, *joined.args)
        else:
            row = await conn.alone(joined.sql, *joined.args)
    except asyncpg.PostgresError as exc:
        if not builtin.refused(exc):
            raise
        row = None
    if row is None:  # nothing written: the locked path, from the start
        await conn.abandon()
        conn.undone()
        return None
    settled, actual = builtin.compared(write, joined, row, changed=values.keys())
    if actual is not None:  # ``matching`` is stricter than this comparison: not expected
        log.warning(
            "event payload rewritten after a lone update: the check in SQL let a difference through",
            extra={"ctx": {"event": str(settled.event)}},
        )
        rewrite = outbox.rewrite_sql()
        if conn.begun:
            await conn.execute(rewrite, actual, settled.event)
        else:
            await conn.alone(rewrite, actual, settled.event)
    return Written(row, None, settled.event, settled.record)
