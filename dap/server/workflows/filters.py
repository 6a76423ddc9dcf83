"""List query strings → a typed query (filters, sort, paging, projection). Pure.

ARCHITECTURE.md fixes the syntax: ``field[op]=value`` with the spec's 13 operators
(``field=value`` is ``eq``; ``in``, ``nin`` and ``between`` take comma-separated values; ``null``
and ``notnull`` take none), ``sort=a,-b``, ``limit`` (default 50, at most 1000), ``offset``,
``count=true``, ``fields=a,b``. Filters work on the entity's REST-visible fields and on the system
columns ``id``, ``version``, ``docstatus``, ``created_at``, ``updated_at`` and ``owner``.
Every value is converted to the field's type here, so ``sql`` only binds typed values and a bad
value is a 400 naming the parameter, never a database error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from dap.config.enums import FieldType, FilterOp
from dap.config.fields import Field
from dap.server import errors, fieldvalues
from dap.server.catalog import Resource
from dap.server.storage import queries, tables

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
MAX_OFFSET = 2**63 - 1  # Postgres' OFFSET is a bigint: a larger one is a client error, not a 500
RESERVED_PARAMS = frozenset({"sort", "limit", "offset", "count", "fields"})
_PARAM = re.compile(r"([a-z][a-z0-9_]*)(?:\[([a-z]+)\])?")
_SCALAR_ONLY = frozenset(
    {FilterOp.GT, FilterOp.GTE, FilterOp.LT, FilterOp.LTE, FilterOp.BETWEEN, FilterOp.LIKE, FilterOp.ILIKE}
)


def _bad(param: str, message: str) -> errors.BadRequest:
    return errors.BadRequest(
        f"invalid list parameter {param!r}: {message}",
        code="SVC.QUERY.INVALID",
        errors=[errors.FieldProblem(param, message)],
    )


def _lookup(resource: Resource, name: str) -> tuple[Field, str] | None:
    """The field and its column for a filter or sort name, system columns included."""
    if name in queries.SYSTEM:
        if name == "docstatus" and not resource.lifecycle:
            return None
        return queries.SYSTEM[name], name
    f = resource.fields.get(name)
    if f is None:
        return None
    column = resource.column(name)
    return (f, column) if column is not None else None


def _convert(f: Field, param: str, text: str) -> Any:
    try:
        value = fieldvalues.from_text(f, text)
    except fieldvalues.InvalidValueError as exc:
        raise _bad(param, str(exc)) from exc
    if f is queries.SYSTEM["docstatus"]:
        return tables.DOCSTATUS.index(value)
    return value


def _condition(resource: Resource, param: str, name: str, op_name: str | None, raw: str) -> queries.Condition:
    found = _lookup(resource, name)
    if found is None:
        raise _bad(param, f"no filterable field {name!r}")
    f, column = found
    try:
        op = FilterOp(op_name or "eq")
    except ValueError as exc:
        raise _bad(
            param, f"unknown operator {op_name!r}; use one of {', '.join(o.value for o in FilterOp)}"
        ) from exc
    if f.masked:
        raise _bad(param, "masked fields cannot be filtered")
    jsonish = f.type in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD) or bool(f.multiple)
    if op in (FilterOp.NULL, FilterOp.NOTNULL):
        if raw not in ("", "true", "1"):
            raise _bad(param, f"{op} takes no value")
        return queries.Condition(column, op, ())
    if jsonish:
        raise _bad(param, "fields holding JSON can only be filtered with null or notnull")
    if op in (FilterOp.LIKE, FilterOp.ILIKE):
        if f is queries.SYSTEM["docstatus"]:  # stored as a number: its names cannot be matched
            raise _bad(param, f"{op} does not apply to docstatus; use docstatus=… or docstatus[in]=…")
        if f.type not in (
            FieldType.STRING,
            FieldType.TEXT,
            FieldType.RICHTEXT,
            FieldType.ENUM,
            FieldType.FILE,
        ):
            raise _bad(param, f"{op} applies to text fields only")
        try:
            fieldvalues.check_text(raw)
        except fieldvalues.InvalidValueError as exc:
            raise _bad(param, str(exc)) from exc
        return queries.Condition(column, op, (raw,))
    if op in _SCALAR_ONLY and f.type in (FieldType.BOOLEAN, FieldType.UUID, FieldType.RELATION):
        raise _bad(param, f"{op} does not apply to {f.type} fields")
    if op in (FilterOp.IN, FilterOp.NIN, FilterOp.BETWEEN):
        parts = raw.split(",") if raw else []
        if op is FilterOp.BETWEEN and len(parts) != 2:
            raise _bad(param, "between takes exactly two comma-separated values")
        if not parts:
            raise _bad(param, f"{op} takes at least one value")
        return queries.Condition(column, op, tuple(_convert(f, param, p) for p in parts))
    return queries.Condition(column, op, (_convert(f, param, raw),))


def _sort(resource: Resource, raw: str) -> tuple[queries.SortKey, ...]:
    keys: list[queries.SortKey] = []
    for part in raw.split(","):
        part = part.strip()
        name = part.lstrip("-")
        found = _lookup(resource, name) if name else None
        if found is None:
            raise _bad("sort", f"cannot sort by {name!r}")
        f, column = found
        if f.type in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD) or f.multiple:
            raise _bad("sort", f"cannot sort by the JSON field {name!r}")
        keys.append(queries.SortKey(column, part.startswith("-")))
    return tuple(keys)


def integer(param: str, raw: str, *, low: int, high: int) -> int:
    """A bounded integer query parameter (``limit``, ``offset``), or 400 naming it."""
    if not raw.strip().isascii():
        raise _bad(param, "expected an integer")
    try:
        value = int(raw)
    except ValueError as exc:
        raise _bad(param, "expected an integer") from exc
    if not low <= value <= high:
        raise _bad(param, f"must be between {low} and {high}")
    return value


def parse(resource: Resource, params: Iterable[tuple[str, str]]) -> queries.ListQuery:
    """Parse the query string pairs of a list request; raise ``BadRequest`` naming the parameter."""
    conditions: list[queries.Condition] = []
    sort: tuple[queries.SortKey, ...] = (queries.SortKey("created_at", True),)
    limit, offset, count = DEFAULT_LIMIT, 0, False
    fields: tuple[str, ...] | None = None
    for param, raw in params:
        if param == "sort":
            sort = _sort(resource, raw)
        elif param == "limit":
            limit = integer(param, raw, low=1, high=MAX_LIMIT)
        elif param == "offset":
            offset = integer(param, raw, low=0, high=MAX_OFFSET)
        elif param == "count":
            if raw not in ("true", "false", "1", "0", ""):
                raise _bad(param, "expected true or false")
            count = raw in ("true", "1", "")
        elif param == "fields":
            names = tuple(n.strip() for n in raw.split(",") if n.strip())
            unknown = [
                n
                for n in names
                if n not in resource.fields and n not in queries.SYSTEM and n not in resource.extensions
            ]
            if unknown or not names:
                raise _bad(param, f"unknown field(s): {', '.join(unknown)}" if unknown else "empty")
            fields = names
        else:
            match = _PARAM.fullmatch(param)
            if match is None:
                raise _bad(param, "expected field or field[op]")
            conditions.append(_condition(resource, param, match.group(1), match.group(2), raw))
    if not any(k.column == "id" for k in sort):
        sort = (*sort, queries.SortKey("id", sort[-1].descending))  # a total order keeps pages stable
    return queries.ListQuery(tuple(conditions), sort, limit, offset, count, fields)
