"""How the UI names a record and which lists of other records belong on its page.

A record page headed by a UUID tells nobody anything; the spec has no ``title_field`` on an
entity, but the manifests already say which field people know a record by. ``title_field``
reads it from them, in this order:

1. the ``display_field`` that relations pointing at the entity name (a supplier is shown by its
   ``name`` wherever an order links to it, so its own page is headed the same way);
2. an engine-numbered natural key (a document number: ``PO-2026-00001``);
3. the first required string field that is not a natural key (a book's title, not its ISBN);
4. any natural key; else none (the UI falls back to the id).

Fields behind a ``required_permission`` or left out of the UI are never chosen: a caller without
the permission would see an empty heading. ``related`` lists the one-to-many relations into an
entity (the books a member has borrowed), for the related lists of a record's page; only
relations of entities exposed over REST with ``list``, which the UI reads through the API.
"""

from __future__ import annotations

from typing import Any

from dap.config.enums import FieldType, NaturalKeyEntry
from dap.config.fields import Field
from dap.server.catalog import Catalog
from dap.server.storage import numbering, tables

UI_SURFACE = "ui"


def _shown(f: Field) -> bool:
    return not f.removed and UI_SURFACE not in f.exclude and not f.required_permission and not f.masked


def _pointing(catalog: Catalog, key: str) -> list[tuple[str, Field]]:
    """(entity key, relation field) of every top-level relation field that targets ``key``."""
    out: list[tuple[str, Field]] = []
    for other, spec in sorted(catalog.entities.items()):
        module = other.split("/", 1)[0]
        for f in spec.fields:
            if (
                f.relation is not None
                and not f.removed
                and tables.resolve_ref(f.relation.entity, module) == key
            ):
                out.append((other, f))
    return out


def title_field(catalog: Catalog, key: str) -> str | None:
    spec = catalog.entities[key]
    usable = {f.name: f for f in spec.fields if _shown(f)}
    for _other, f in _pointing(catalog, key):
        assert f.relation is not None
        if f.relation.display_field in usable:
            return f.relation.display_field
    keys = [(f, numbering.key_of(f)) for f in usable.values()]
    for f, k in keys:
        if k is not None and k.entry is NaturalKeyEntry.ENGINE:
            return f.name
    for f, k in keys:
        if k is None and f.required and f.type is FieldType.STRING and not f.multiple:
            return f.name
    for f, k in keys:
        if k is not None:
            return f.name
    return None


def related(catalog: Catalog, key: str) -> list[dict[str, Any]]:
    """The lists a record of ``key`` heads: ``{entity, field, title}`` per relation into it."""
    out: list[dict[str, Any]] = []
    for other, f in _pointing(catalog, key):
        resource = catalog.resources.get(other)
        if resource is None or "list" not in resource.actions or UI_SURFACE in f.exclude:
            continue
        if f.required_permission:
            continue
        out.append({"entity": other, "field": f.name, "title": catalog.titles.get(other, other)})
    return out
