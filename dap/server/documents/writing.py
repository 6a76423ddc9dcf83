"""The steps of a write around its SQL: body validation, column split, relations, children,
``on_delete`` effects, and the translation of Postgres refusals into client errors.

Each step runs inside the handler's transaction (``web.rest``, ``documents.lifecycle``). There
are no foreign keys (tables stay distributable by tenant, see docs/decisions/server.md), so
relations are checked and ``on_delete`` effects applied here, in the same transaction as the write.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import asyncpg

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server import errors, fieldvalues
from dap.server.catalog import Catalog, RelationSlot, Resource
from dap.server.documents import references
from dap.server.storage import caching, db, sql, tables

RESERVED_INPUT = frozenset({*tables.SYSTEM_FIELDS, "tenant_id"})


def _child_fields(resource: Resource, catalog: Catalog) -> dict[str, tuple[Field, ...]]:
    """The fields of each child field's rows, derived once per resource (``Resource.derived``)."""
    found: dict[str, tuple[Field, ...]] | None = resource.derived.get(_CHILD_FIELDS)
    if found is None:
        found = resource.derived[_CHILD_FIELDS] = {
            name: tables.child_fields(f, resource.module, catalog.entities)
            for name, f in resource.fields.items()
            if f.child is not None
        }
    return found


_CHILD_FIELDS = (__name__, "child_fields")
_COLUMNS = (__name__, "columns")


def validate_body(
    resource: Resource, body: Mapping[str, Any], *, partial: bool, catalog: Catalog
) -> dict[str, Any]:
    children = _child_fields(resource, catalog)
    namespaces: dict[str, Any] = {}
    if resource.extensions:  # their objects are validated apart, below
        body = dict(body)
        namespaces = {ns: body.pop(ns) for ns in resource.extensions if ns in body}
    problems: list[tuple[str, str]] = []
    values: dict[str, Any] = {}
    try:
        values = fieldvalues.coerce_row(
            resource.fields, body, partial=partial, children=children, reserved=RESERVED_INPUT
        )
    except fieldvalues.InvalidRowError as exc:
        problems += exc.problems
    for ns, data in namespaces.items():  # an extension object is replaced as a whole
        if data is None:
            values[ns] = None
            continue
        if not isinstance(data, dict):
            problems.append((ns, "expected an object"))
            continue
        try:
            values[ns] = fieldvalues.coerce_row(resource.extensions[ns], data, partial=False)
        except fieldvalues.InvalidRowError as exc:
            problems += [(f"{ns}.{p}", m) for p, m in exc.problems]
    if problems:
        code = "SVC.DOC.RESERVED_FIELD" if any(p in RESERVED_INPUT for p, _ in problems) else None
        raise errors.ValidationFailed(
            f"{len(problems)} field(s) are invalid",
            code=code,
            errors=[errors.FieldProblem(p, m) for p, m in problems],
        )
    return values


def translate(resource: Resource, exc: asyncpg.PostgresError) -> errors.ApiError:
    """Map a database refusal of bad input to a client error; anything else stays a server error."""
    if isinstance(exc, asyncpg.UniqueViolationError):
        index = next((i for i in resource.table.indexes if i.name == exc.constraint_name), None)
        field = next(
            (c.field for c in resource.table.columns if index is not None and c.name == index.columns[-1]),
            None,
        )
        path = field or "id"
        return errors.Conflict(
            f"another record of this workspace already has this {path}",
            code="SVC.VALIDATE.DUPLICATE",
            errors=[errors.FieldProblem(path, "must be unique within the workspace")],
        )
    if isinstance(exc, asyncpg.DataError):
        return errors.ValidationFailed(f"a value does not fit its column: {exc.__class__.__name__}")
    if isinstance(exc, asyncpg.DeadlockDetectedError):
        # e.g. pointing a record at X while X's delete clears its referrers: Postgres aborts one
        return errors.Conflict(
            "another write on related records ran at the same time; nothing was changed, try again",
            code="SVC.WRITE.CONCURRENT",
        )
    raise exc


def split(resource: Resource, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Field values → (column values of the main table, child field → rows)."""
    places = _places(resource)
    if not resource.children:
        return {places[name]: value for name, value in values.items() if name in places}, {}
    columns: dict[str, Any] = {}
    children: dict[str, Any] = {}
    for name, value in values.items():
        if name in resource.children:
            children[name] = value or []
        elif name in places:
            columns[places[name]] = value
    return columns, children


def _places(resource: Resource) -> dict[str, str]:
    """The main table's column of each field and extension namespace that has one (not the child
    fields), as ``resource.column`` finds it, derived once per resource (``Resource.derived``)."""
    found: dict[str, str] | None = resource.derived.get(_COLUMNS)
    if found is None:
        table, found = resource.table, {}
        for c in table.columns:  # the first column of each field, as ``Table.column_for``
            if c.field is not None and c.field not in found:
                found[c.field] = c.name
        for ns in resource.extensions:  # a namespace's object is its own column
            ext = table.column_for(f"ext_{ns}")
            if ext is not None:
                found[ns] = ext.name
            else:
                found.pop(ns, None)
        for name in resource.children:
            found.pop(name, None)
        resource.derived[_COLUMNS] = found
    return found


def _carried(slot: RelationSlot, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(path, id)`` of every id the write carries at ``slot``."""
    if slot.kind == "record":
        places: list[tuple[str, Mapping[str, Any]]] = [("", values)]
    elif slot.kind == "child":
        rows = values.get(slot.container) or []
        places = [(f"{slot.container}[{i}].", row) for i, row in enumerate(rows) if isinstance(row, Mapping)]
    else:
        data = values.get(slot.container)
        places = [(f"{slot.container}.", data)] if isinstance(data, Mapping) else []
    out: list[tuple[str, Any]] = []
    for prefix, place in places:
        value = place.get(slot.field)
        items = value if slot.multiple and isinstance(value, list) else [value]
        out += [(f"{prefix}{slot.field}", v) for v in items if v is not None]
    return out


async def check_relations(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, values: Mapping[str, Any]
) -> None:
    """Every related id, in the record, its child rows and its extensions, must name a record of the
    same workspace (there is no foreign key); one statement per target table."""
    wanted: dict[str, list[tuple[str, uuid.UUID]]] = {}
    for slot in resource.relation_slots:
        for path, value in _carried(slot, values):
            wanted.setdefault(slot.target, []).append(
                (path, value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
            )
    problems = []
    for target, pairs in wanted.items():
        rows = await conn.fetch(sql.related_found(target), tenant, sorted({v for _, v in pairs}))
        found = {row["id"] for row in rows}
        problems += [
            errors.FieldProblem(path, "no such related record in this workspace")
            for path, value in pairs
            if value not in found
        ]
    if problems:
        raise errors.ValidationFailed(
            f"{len(problems)} relation(s) point nowhere",
            code="SVC.VALIDATE.RELATION_NOT_FOUND",
            errors=problems,
        )


async def write_children(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    parent: uuid.UUID,
    rows: Mapping[str, Any],
) -> None:
    for field_name, items in rows.items():
        child = resource.children[field_name]
        await conn.execute(*sql.flat(sql.delete_children(child, tenant, parent)))
        cols = [c for c in child.columns if c.field is not None and c.name not in tables.CHILD_KEYS]
        keyed = any(c.name == "idx" and c.field for c in child.columns)
        if items:  # rows come ordered (deriving); a declared ``idx`` field is the key column itself
            await conn.executemany(
                sql.insert_children(child, [c.name for c in cols]),
                [
                    (tenant, parent, item.get("idx", i) if keyed else i, *(item.get(c.field) for c in cols))
                    for i, item in enumerate(items)
                ],
            )


async def release_references(
    conn: db.Connection,
    catalog: Catalog,
    resource: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
) -> list[tuple[str, uuid.UUID]]:
    """Apply each referring relation's ``on_delete``: restrict refuses, set_null clears, cascade deletes.

    There are no foreign keys (see docs/decisions/server.md), so this runs in the delete's
    transaction; every refusal (references.check_delete) is checked before anything is changed.
    Answers ``(table, id)`` of each record the cascade deleted whose entity has ``file`` fields:
    the caller removes their bytes once the delete committed (``storage.files``).
    """
    gone: list[tuple[str, uuid.UUID]] = []
    referrers = catalog.referrers.get(resource.table.name, ())
    await references.check_delete(conn, catalog, resource, tenant, record_id)
    for ref in referrers:
        if ref.on_delete in ("set_null", "cascade"):  # rows of other tables change: forget their answers
            await caching.announce(conn, catalog.resources.get(ref.entity), tenant)
        if ref.on_delete == "set_null":
            await conn.execute(
                *sql.flat(sql.clear_reference(ref.table, ref.column, tenant, record_id, ref.kind == "entity"))
            )
        elif ref.on_delete == "cascade":
            for child in ref.children:
                await conn.execute(
                    *sql.flat(
                        sql.delete_children_of_referrers(child, ref.table, ref.column, tenant, record_id)
                    )
                )
            if ref.kind == "entity" and _holds_files(catalog.resources.get(ref.entity)):
                rows = await conn.fetch(
                    *sql.flat(sql.delete_referrers(ref.table, ref.column, tenant, record_id, returning=True))
                )
                gone.extend((ref.table, row["id"]) for row in rows)
            else:
                await conn.execute(*sql.flat(sql.delete_referrers(ref.table, ref.column, tenant, record_id)))
    return gone


def _holds_files(resource: Resource | None) -> bool:
    """Whether records of ``resource`` may have bytes on the file store (a ``file`` field)."""
    return resource is not None and any(f.type is FieldType.FILE for f in resource.fields.values())
