"""The audit trail: ``dap.audit_log`` rows written in the transaction of the write they describe.

What is recorded (docs/decisions/server.md, "Lifecycle, references and audit"):

- every move of an action declared with ``audit: true`` — the standard ``create``, ``update``,
  ``delete``, ``submit``, ``cancel`` are re-declared by name in ``actions`` to set it — with the
  change of every field;
- an ``update`` that changes a field declared ``audited: true``, with the change of the audited
  fields only (the other fields were not asked to be kept).

A row holds ``changes`` as ``{field: [before, after]}`` over the record as the REST API shows it
(``docstatus`` included, masked fields as ``"****"``, child fields as their row lists), the actor
(``sub`` and ``username`` of the token), the request id, the version the write produced and
``at`` (the transaction's time, equal to the record's ``updated_at``). Change detection compares
the stored values, so a masked field that changed is recorded (masked) even though both sides read
``"****"``.

The row is inserted on the write's own connection inside its transaction: a write that fails or
rolls back leaves no audit row, and an audit row that cannot be written fails the write.

The rows are served by ``dap.server.web.trails`` (``GET …/{id}/_audit``). This module imports no part of the
web stack, so that booting can create the table before aiohttp is loaded.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dap.server import fieldvalues
from dap.server.storage import db, tables

if TYPE_CHECKING:
    import asyncpg

    from dap.server.catalog import Catalog, Resource

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.audit_log (
    tenant_id uuid NOT NULL,
    id bigserial NOT NULL,
    entity text NOT NULL,
    record_id uuid NOT NULL,
    action text NOT NULL,
    actor_sub text NOT NULL,
    actor_username text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    version bigint,
    changes jsonb NOT NULL,
    request_id text,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX IF NOT EXISTS audit_log_record_idx ON dap.audit_log (tenant_id, entity, record_id, id DESC);
-- the id served to clients: the bigserial above orders rows, but its gaps would show how much
-- every other tenant writes, so it never leaves the server (rows of older versions get one here)
ALTER TABLE dap.audit_log ADD COLUMN IF NOT EXISTS public_id uuid NOT NULL DEFAULT gen_random_uuid();
"""

INSERT = (
    "INSERT INTO dap.audit_log "
    "(tenant_id, entity, record_id, action, actor_sub, actor_username, version, changes, request_id) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
)
SELECT = (
    "SELECT public_id, action, actor_sub, actor_username, at, version, changes, request_id "
    "FROM dap.audit_log WHERE tenant_id = $1 AND entity = $2 AND record_id = $3 "
    "ORDER BY id DESC LIMIT $4 OFFSET $5"
)
DOCSTATUS = "docstatus"


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


@dataclass(slots=True)  # made per write, never assigned to: see operations.Call
class Write:
    """One write of one resource in one request: who writes, in which workspace, under which spec."""

    catalog: Catalog
    resource: Resource
    tenant: uuid.UUID
    sub: str
    username: str
    request_id: str | None = None


def recorded(resource: Resource, action: str) -> frozenset[str] | None:
    """The names whose changes a move of ``action`` records; ``None`` when it writes no audit row.
    Derived once per resource and action (every create and update asks)."""
    key = (__name__, action)
    try:
        found: frozenset[str] | None = resource.derived[key]
    except KeyError:
        found = resource.derived[key] = _recorded(resource, action)
    return found


def _recorded(resource: Resource, action: str) -> frozenset[str] | None:
    declared = resource.spec.action(action)
    if declared is not None and declared.audit:
        names = {slot.name for slot in resource.slots}
        return frozenset(names | ({DOCSTATUS} if resource.lifecycle else set()))
    if action == "update" and any(f.audited for f in resource.fields.values()):
        shown = {slot.name for slot in resource.slots}
        return frozenset(n for n, f in resource.fields.items() if f.audited and n in shown) or None
    return None


@dataclass(frozen=True)
class Snapshot:
    """A record as compared (stored values) and as recorded (the REST presentation, masked)."""

    raw: Mapping[str, Any]
    shown: Mapping[str, Any]


async def snapshot(conn: db.Connection, write: Write, row: Mapping[str, Any] | asyncpg.Record) -> Snapshot:
    """The record of ``row`` (a full row of its table) with its child rows, read in the transaction."""
    resource = write.resource
    record_id = row["id"]
    raw: dict[str, Any] = {}
    shown: dict[str, Any] = {}
    for slot in resource.slots:
        if slot.column is None:
            continue
        value = row[slot.column]
        raw[slot.name] = value
        shown[slot.name] = value if slot.convert is None or value is None else slot.convert(value)
    if resource.lifecycle:
        raw[DOCSTATUS] = shown[DOCSTATUS] = tables.DOCSTATUS[row["docstatus"]]
    for name in (slot.name for slot in resource.slots if slot.column is None):
        child = resource.children[name]
        decls = {
            f.name: f
            for f in tables.child_fields(resource.fields[name], resource.module, write.catalog.entities)
        }
        columns = [(c.field, c.name) for c in child.columns if c.field is not None and c.field in decls]
        rows_raw: list[dict[str, Any]] = []
        rows_shown: list[dict[str, Any]] = []
        statement, args = _child_rows(child.name, write.tenant, record_id)
        for item in await conn.fetch(statement, *args):
            rows_raw.append({f: item[c] for f, c in columns})
            rows_shown.append({f: fieldvalues.present(decls[f], item[c]) for f, c in columns})
        raw[name], shown[name] = rows_raw, rows_shown
    return Snapshot(raw, shown)


def _child_rows(table: str, tenant: uuid.UUID, parent: uuid.UUID) -> tuple[str, list[Any]]:
    return (
        f"SELECT * FROM {tables.quote(table)} WHERE tenant_id = $1 AND parent_id = $2 ORDER BY idx",
        [tenant, parent],
    )


def _blank(value: Any) -> bool:
    return value is None or value == []


def changes(before: Snapshot | None, after: Snapshot | None, names: frozenset[str]) -> dict[str, list[Any]]:
    """``{name: [before, after]}`` (as shown) for every name whose stored value differs. Pure."""
    out: dict[str, list[Any]] = {}
    for name in sorted(names):
        old = before.raw.get(name) if before is not None else None
        new = after.raw.get(name) if after is not None else None
        if old == new or (_blank(old) and _blank(new)):
            continue
        out[name] = [
            before.shown.get(name) if before is not None else None,
            after.shown.get(name) if after is not None else None,
        ]
    return out


@dataclass
class Trail:
    """The audit row of one move, begun before the write (the record as it was) and finished after."""

    write: Write
    action: str
    names: frozenset[str] | None
    before: Snapshot | None = None
    record_id: uuid.UUID | None = None
    # a delete's trail also holds those of the records its relations' on_delete changes
    released: list[Trail] = dataclasses.field(default_factory=list)

    async def finish(self, conn: db.Connection, row: Mapping[str, Any] | asyncpg.Record | None) -> None:
        """Record the move that left ``row`` (``None`` after a delete) — in the caller's transaction."""
        for other in self.released:
            left = None
            if other.action == "update" and other.record_id is not None:  # set_null left it in place
                table = other.write.resource.table
                left = await conn.fetchrow(
                    f"SELECT {table.select_columns} FROM {tables.quote(table.name)} "
                    "WHERE tenant_id = $1 AND id = $2",
                    other.write.tenant,
                    other.record_id,
                )
            await other.finish(conn, left)
        if self.names is None:
            return
        after = await snapshot(conn, self.write, row) if row is not None else None
        found = changes(self.before, after, self.names)
        declared = self.write.resource.spec.action(self.action)
        if not found and not (declared is not None and declared.audit):
            return  # an update that left every audited field as it was
        target = row["id"] if row is not None else self.record_id
        assert target is not None
        await record(
            conn,
            self.write,
            record_id=target,
            action=self.action,
            version=row["version"] if row is not None else None,
            changes=found,
        )


async def begin(
    conn: db.Connection, write: Write, action: str, current: Mapping[str, Any] | asyncpg.Record | None
) -> Trail:
    """Start the audit row of ``action`` on the record ``current`` (``None`` for a create).

    Costs nothing when the action records nothing; otherwise it reads the child rows as they were.
    """
    names = recorded(write.resource, action)
    before = await snapshot(conn, write, current) if names is not None and current is not None else None
    trail = Trail(write, action, names, before, current["id"] if current is not None else None)
    if action == "delete" and current is not None:
        trail.released = await _released(conn, write, current["id"])
    return trail


def referring_rows(resource: Resource, column: str, child: str | None, *, own_table: bool) -> str:
    """The rows of ``resource`` whose ``column`` (of the child table ``child``, if given) holds the
    id ``$2`` (tenant ``$1``), locked for the delete that changes them. Pure."""
    table = tables.quote(resource.table.name)
    if child is None:
        match = f"{tables.quote(column)} = $2"
    else:
        match = (
            f"id IN (SELECT parent_id FROM {tables.quote(child)} "
            f"WHERE tenant_id = $1 AND {tables.quote(column)} = $2)"
        )
    own = " AND id <> $2" if own_table else ""  # the deleted record itself is not released
    where = f"tenant_id = $1 AND {match}{own}"
    return f"SELECT {resource.table.select_columns} FROM {table} WHERE {where} FOR UPDATE"


async def _released(conn: db.Connection, write: Write, record_id: uuid.UUID) -> list[Trail]:
    """Trails of the records that deleting ``record_id`` changes (``set_null``: an update) or deletes
    (``cascade``), for those whose entity records that move; read before the delete changes them."""
    out: list[Trail] = []
    own = write.resource.table.name
    for ref in write.catalog.referrers.get(own, ()):
        if ref.on_delete not in ("set_null", "cascade"):
            continue
        target = write.catalog.resources.get(ref.entity)  # an entity not exposed over REST has no trail
        action = "update" if ref.on_delete == "set_null" else "delete"
        names = recorded(target, action) if target is not None else None
        if target is None or names is None:
            continue
        other = dataclasses.replace(write, resource=target)
        child = ref.table if ref.kind == "child" else None
        statement = referring_rows(target, ref.column, child, own_table=ref.owner == own)
        for row in await conn.fetch(statement, write.tenant, record_id):
            out.append(Trail(other, action, names, await snapshot(conn, other, row), row["id"]))
    return out


async def record(
    conn: db.Connection,
    write: Write,
    *,
    record_id: uuid.UUID,
    action: str,
    version: int | None,
    changes: Mapping[str, list[Any]],
) -> None:
    """Insert one audit row (for moves that are not a plain before/after write, e.g. custom actions)."""
    await conn.execute(
        INSERT,
        write.tenant,
        write.resource.key,
        record_id,
        action,
        write.sub,
        write.username,
        version,
        dict(changes),
        write.request_id,
    )
