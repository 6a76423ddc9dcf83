"""Records as the API shows them: the JSON of a stored row, and the child rows of a set of records.

Every answer that carries a record (find, list, create, update, submit/cancel) is built by
:func:`present` from the row the statement returned, plus the child rows :func:`load_children`
reads in one statement per child table.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from dap.server import fieldvalues
from dap.server.catalog import Catalog, Presented, Resource
from dap.server.storage import db, sql, tables


def present(
    resource: Resource,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None = None,
    *,
    surface: str = "rest",
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The JSON of one stored row: REST-visible fields plus the system fields."""
    if only is not None:
        return _present_only(resource, row, children, surface, only)
    out: dict[str, Any] = {}
    for name, column, convert in _shown(resource, surface):
        if column is None:
            out[name] = children.get(name, []) if children else []
            continue
        value = row[column]
        out[name] = value if convert is None or value is None else convert(value)
    out["id"] = str(row["id"])
    out["version"] = row["version"]
    if resource.lifecycle:
        out["docstatus"] = tables.DOCSTATUS[row["docstatus"]]
    out["created_at"] = fieldvalues.iso_text(row["created_at"])
    out["updated_at"] = fieldvalues.iso_text(row["updated_at"])
    out["owner"] = row["owner"]
    return out


def shown(resource: Resource, surface: str) -> tuple[Presented, ...]:
    """The ``(name, column, convert)`` of each slot ``surface`` shows (``column`` ``None``: child rows)."""
    return _shown(resource, surface)


def _shown(resource: Resource, surface: str) -> tuple[Presented, ...]:
    """The slots ``surface`` shows, as plain tuples: a list page answers this per row."""
    shown = resource.presenting.get(surface)
    if shown is None:
        shown = resource.presenting[surface] = tuple(
            (slot.name, slot.column, slot.convert) for slot in resource.slots if surface not in slot.exclude
        )
    return shown


def _present_only(
    resource: Resource,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None,
    surface: str,
    only: Sequence[str],
) -> dict[str, Any]:
    """:func:`present` with ``fields=``: the named fields, and the id always."""
    out: dict[str, Any] = {}
    for name, column, convert in _shown(resource, surface):
        if name not in only:
            continue
        if column is None:
            out[name] = (children or {}).get(name, [])
            continue
        value = row[column]
        out[name] = value if convert is None or value is None else convert(value)
    out["id"] = str(row["id"])  # always, even with ``fields=``
    if "version" in only:
        out["version"] = row["version"]
    if resource.lifecycle and "docstatus" in only:
        out["docstatus"] = tables.DOCSTATUS[row["docstatus"]]
    for name in ("created_at", "updated_at"):
        if name in only:
            out[name] = fieldvalues.iso_text(row[name])
    if "owner" in only:
        out["owner"] = row["owner"]
    return out


async def load_children(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    ids: Sequence[uuid.UUID],
    catalog: Catalog,
) -> dict[uuid.UUID, dict[str, list[dict[str, Any]]]]:
    out: dict[uuid.UUID, dict[str, list[dict[str, Any]]]] = {i: {} for i in ids}
    if not ids:
        return out
    for field_name, child in resource.children.items():
        statement, args = sql.child_rows(child, tenant, ids)
        child_specs = {c.field: c for c in child.columns if c.field}
        decls = {
            f.name: f
            for f in tables.child_fields(resource.fields[field_name], resource.module, catalog.entities)
        }
        for row in await conn.fetch(statement, *args):
            item = {
                name: fieldvalues.present(decls[name], row[col.name])
                for name, col in child_specs.items()
                if name is not None and name in decls
            }
            out[row["parent_id"]].setdefault(field_name, []).append(item)
    return out
