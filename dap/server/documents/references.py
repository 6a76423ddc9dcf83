"""Who refers to a record, and which moves that forbids. Runs in the move's transaction.

There are no foreign keys (docs/decisions/server.md, Storage), so the server keeps references
sound itself, on rows the move has locked:

- **delete** of a record is refused while a relation declared ``on_delete: restrict`` (the
  default) holds its id, and while a *document* (a row of a ``lifecycle`` entity, or a child row of
  one) that is submitted or cancelled holds it under any ``on_delete`` — such a document can be
  neither changed (``set_null``) nor deleted (``cascade``);
- **cancel** of a submitted document is refused while a submitted document holds its id;
- **submit** of a document is refused while one of its relations (its own or its child rows')
  names a cancelled document; the targets are locked ``FOR SHARE`` for the rest of the submit, so a
  concurrent cancel of a target waits and then sees the new submitted referrer.

Codes: the referrer of the same entity family (the entity's own table or its child tables — a
self-relation such as ``amended_from``, a tree ``parent``, or a child row of another record of
the same entity) answers ``SVC.DOC.DELETE_REFERENCED`` / ``SVC.DOC.CANCEL_REFERENCED``; a
relation of another entity answers ``SVC.REF.DELETE_BLOCKED`` / ``SVC.REF.CANCEL_BLOCKED``. When
both kinds block, the ``DOC`` code answers. Every blocking relation is listed in ``errors`` as
``{"path": "module/entity.field", ...}``. The record's own rows (a self-reference, its own child
rows) never block: they go with it. Multi-valued relations and relations inside jsonb child rows
hold no column of ids and are not checked.
"""

from __future__ import annotations

import uuid

from dap.server import errors
from dap.server.catalog import Catalog, Referrer, Resource
from dap.server.storage import db, tables

DRAFT, SUBMITTED, CANCELLED = 0, 1, 2


def referring(ref: Referrer, *, own_table: bool, state: str | None = None) -> str:
    """Whether rows of ``ref`` hold the id ``$2`` (tenant ``$1``). Pure.

    ``own_table``: the referrer is of the record's own family, whose own rows are left out.
    ``state``: a condition on the referring document's ``docstatus`` (e.g. ``= 1``).
    """
    column = tables.quote(ref.column)
    where = ["r.tenant_id = $1", f"r.{column} = $2"]
    if ref.kind == "entity":
        if own_table:
            where.append("r.id <> $2")
        if state is not None:
            where.append(f"r.docstatus {state}")
    else:
        if own_table:
            where.append("r.parent_id <> $2")
        if state is not None:
            where.append(
                f"EXISTS (SELECT 1 FROM {tables.quote(ref.owner)} d "
                f"WHERE d.tenant_id = $1 AND d.id = r.parent_id AND d.docstatus {state})"
            )
    return f"SELECT EXISTS (SELECT 1 FROM {tables.quote(ref.table)} r WHERE {' AND '.join(where)})"


def targets(ref: Referrer, target: str) -> str:
    """The ``docstatus`` of every ``target`` row the record ``$2``'s ``ref`` column names, locked
    ``FOR SHARE`` (tenant ``$1``). Pure."""
    column = tables.quote(ref.column)
    key = "id" if ref.kind == "entity" else "parent_id"
    return (
        f"SELECT t.docstatus FROM {tables.quote(target)} t WHERE t.tenant_id = $1 AND t.id IN "
        f"(SELECT r.{column} FROM {tables.quote(ref.table)} r WHERE r.tenant_id = $1 AND r.{key} = $2) "
        "FOR SHARE OF t"
    )


def _is_document(catalog: Catalog, ref: Referrer) -> bool:
    spec = catalog.entities.get(ref.entity)
    return spec is not None and spec.lifecycle


def _refuse(
    blocked: list[tuple[Referrer, str]], resource: Resource, *, doc_code: str, ref_code: str, what: str
) -> None:
    if not blocked:
        return
    family = any(ref.owner == resource.table.name for ref, _ in blocked)
    raise errors.Conflict(
        f"other records refer to this one, so it cannot be {what}; the errors name them",
        code=doc_code if family else ref_code,
        errors=[errors.FieldProblem(f"{ref.entity}.{ref.field}", message) for ref, message in blocked],
    )


async def check_delete(
    conn: db.Connection, catalog: Catalog, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID
) -> None:
    """Refuse (409) deleting ``record_id`` while a restricting relation or a settled document names it."""
    blocked: list[tuple[Referrer, str]] = []
    for ref in catalog.referrers.get(resource.table.name, ()):
        own = ref.owner == resource.table.name
        if ref.on_delete == "restrict":
            if await conn.fetchval(referring(ref, own_table=own), tenant, record_id):
                blocked.append((ref, "records refer to this one"))
        elif _is_document(catalog, ref) and await conn.fetchval(
            referring(ref, own_table=own, state=f"<> {DRAFT}"), tenant, record_id
        ):
            blocked.append(
                (
                    ref,
                    f"submitted or cancelled documents refer to this one; {ref.on_delete} cannot change them",
                )
            )
    _refuse(
        blocked,
        resource,
        doc_code="SVC.DOC.DELETE_REFERENCED",
        ref_code="SVC.REF.DELETE_BLOCKED",
        what="deleted",
    )


async def check_cancel(
    conn: db.Connection, catalog: Catalog, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID
) -> None:
    """Refuse (409) the cancel of ``record_id`` while a submitted document names it."""
    blocked: list[tuple[Referrer, str]] = []
    for ref in catalog.referrers.get(resource.table.name, ()):
        if not _is_document(catalog, ref):
            continue
        own = ref.owner == resource.table.name
        if await conn.fetchval(referring(ref, own_table=own, state=f"= {SUBMITTED}"), tenant, record_id):
            blocked.append((ref, "submitted documents refer to this one; cancel them first"))
    _refuse(
        blocked,
        resource,
        doc_code="SVC.DOC.CANCEL_REFERENCED",
        ref_code="SVC.REF.CANCEL_BLOCKED",
        what="cancelled",
    )


async def check_submit(
    conn: db.Connection, catalog: Catalog, resource: Resource, tenant: uuid.UUID, record_id: uuid.UUID
) -> None:
    """Refuse (409 ``SVC.REF.TARGET_CANCELLED``) the submit of a document that names a cancelled one.

    Locks every named document ``FOR SHARE`` until the submit commits.
    """
    by_name = {t.name: t for t in catalog.tables}
    problems: list[errors.FieldProblem] = []
    for target, refs in catalog.referrers.items():
        owner = by_name.get(target)
        spec = catalog.entities.get(owner.entity) if owner is not None else None
        if spec is None or not spec.lifecycle:
            continue
        for ref in refs:
            if ref.owner != resource.table.name:
                continue
            states = [r["docstatus"] for r in await conn.fetch(targets(ref, target), tenant, record_id)]
            if CANCELLED in states:
                table = by_name.get(ref.table)
                path = ref.field if ref.kind == "entity" or table is None else f"{table.field}.{ref.field}"
                problems.append(errors.FieldProblem(path, "names a cancelled document"))
    if problems:
        raise errors.Conflict(
            "this document refers to cancelled documents; point it elsewhere before submitting",
            code="SVC.REF.TARGET_CANCELLED",
            errors=problems,
        )
