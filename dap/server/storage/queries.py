"""The typed list query that ``sql`` builds statements from, and the system columns as fields. Pure.

``dap.server.workflows.filters`` parses a request's query string into a :class:`ListQuery`; row scope
(``dap.server.access.scoping``) appends its conditions to it. Keeping the shape here, below both,
lets each of them and the SQL builder agree on it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dap.config.enums import FieldType, FilterOp
from dap.config.fields import Field
from dap.server.storage import tables

# System columns seen as fields, so that filters and sort treat them like any other.
SYSTEM: dict[str, Field] = {
    "id": Field(name="id", type=FieldType.UUID),
    "version": Field(name="version", type=FieldType.INTEGER),
    "docstatus": Field(name="docstatus", type=FieldType.ENUM, enum_values=tables.DOCSTATUS),
    "created_at": Field(name="created_at", type=FieldType.DATETIME),
    "updated_at": Field(name="updated_at", type=FieldType.DATETIME),
    "owner": Field(name="owner", type=FieldType.STRING),
}


@dataclass(frozen=True)
class Condition:
    column: str  # Postgres identifier
    op: FilterOp
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SortKey:
    column: str
    descending: bool


@dataclass(frozen=True)
class ListQuery:
    conditions: tuple[Condition, ...]
    sort: tuple[SortKey, ...]
    limit: int
    offset: int
    count: bool
    fields: tuple[str, ...] | None  # output field names; None = all
