"""Row scope: which records of an entity one caller may see and write. Pure.

The spec's "Filter roles": filters and fixed filters are renderer conveniences, but a value taken
from the session can be neither supplied nor widened by the client, and a literal fixed value is a
server-enforced constant. So an entity's row scope is the AND of

- each ``assignments`` entry: the record's ``field`` equals the caller's ``principal_field``;
- each ``filters``/``fixed_filters`` entry with ``from: session``: ``field <op> <caller's attr>``;
- each ``fixed_filters`` entry with a literal ``value`` (or op ``null``/``notnull``): a constant.

The caller's identity values (:class:`Identity`) are ``username``, ``principal_id`` (the JWT
``sub``), ``workspace`` (the URL's slug) and any key of the JWT ``attrs``; a list-valued attribute
means "one of". An identity that lacks a value makes that condition match nothing: the scope
fails closed. Values are converted to the field's type once per request (a value that does not
convert matches nothing as well).

A :class:`Bound` condition is used twice: as SQL (:func:`conditions`, appended to the ``WHERE``
of every statement that reads or locks records) and in Python (:func:`refusals`, for the values a
create or update is about to write), with the same meaning, NULL never matching a comparison.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dap.config.entities import EntitySpec
from dap.config.enums import FieldType, FilterFrom, FilterOp
from dap.config.fields import Field
from dap.server import fieldvalues
from dap.server.catalog import Resource
from dap.server.storage import queries, tables


class Source(StrEnum):
    ASSIGNMENT = "assignment"
    SESSION = "session"
    CONSTANT = "constant"


_MEMBERSHIP = frozenset({FilterOp.EQ, FilterOp.IN})
_EXCLUSION = frozenset({FilterOp.NEQ, FilterOp.NIN})
_SINGLE = frozenset({FilterOp.GT, FilterOp.GTE, FilterOp.LT, FilterOp.LTE, FilterOp.LIKE, FilterOp.ILIKE})
_COMPARE: dict[FilterOp, Callable[[Any, Any], bool]] = {
    FilterOp.GT: operator.gt,
    FilterOp.GTE: operator.ge,
    FilterOp.LT: operator.lt,
    FilterOp.LTE: operator.le,
}


@dataclass(frozen=True)
class Rule:
    """One declared condition, before it meets a caller."""

    field: str
    op: FilterOp
    source: Source
    attr: str | None = None  # identity attribute (assignment, session)
    value: str | None = None  # literal as text (constant); lists comma-separated


def rules(spec: EntitySpec) -> tuple[Rule, ...]:
    """The row-scope rules an entity declares, in declaration order, without repeats."""
    found: list[Rule] = [
        Rule(a.field, FilterOp.EQ, Source.ASSIGNMENT, attr=a.principal_field) for a in spec.assignments
    ]
    for flt in (*spec.filters, *spec.fixed_filters):
        if flt.from_ is FilterFrom.SESSION and flt.attr:
            found.append(Rule(flt.field, flt.op, Source.SESSION, attr=flt.attr))
    for flt in spec.fixed_filters:
        if flt.from_ is None and (flt.value is not None or flt.op in (FilterOp.NULL, FilterOp.NOTNULL)):
            found.append(Rule(flt.field, flt.op, Source.CONSTANT, value=_text(flt.value)))
    unique: list[Rule] = []
    for rule in found:
        if not any(
            rule.field == u.field and rule.op is u.op and rule.attr == u.attr and rule.value == u.value
            for u in unique
        ):
            unique.append(rule)
    return tuple(unique)


@dataclass(frozen=True)
class Identity:
    """The values a caller brings to row scope."""

    username: str
    principal_id: str
    workspace: str
    attrs: Mapping[str, Any]

    def values(self, attr: str) -> tuple[Any, ...]:
        """The caller's values of ``attr`` (empty when it has none)."""
        builtin = {"username": self.username, "principal_id": self.principal_id, "workspace": self.workspace}
        if attr in builtin:
            raw: Any = builtin[attr]
        else:
            raw = self.attrs.get(attr)
        items = raw if isinstance(raw, list | tuple) else [raw]
        return tuple(
            v for v in items if v is not None and v != "" and isinstance(v, str | int | float | bool)
        )


@dataclass(frozen=True)
class Bound:
    """A rule resolved for one caller: ``field <op> values`` over ``column``."""

    field: str
    column: str
    op: FilterOp  # IN, NIN, a comparison, LIKE/ILIKE, BETWEEN, NULL or NOTNULL
    values: tuple[Any, ...]
    rule: Rule

    @property
    def nothing(self) -> bool:
        """Whether this condition matches no record at all (the identity lacks the value)."""
        return self.op is FilterOp.IN and not self.values

    @property
    def single(self) -> Any | None:
        """The one value a create may fill in when the field is left out, if there is exactly one."""
        return self.values[0] if self.op is FilterOp.IN and len(self.values) == 1 else None


def _text(value: str | int | float | bool | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def target(resource: Resource, name: str) -> tuple[Field, str] | None:
    """The field (system columns included) and its column that a scope condition compares."""
    if name in queries.SYSTEM:
        if name == "docstatus" and not resource.lifecycle:
            return None
        return queries.SYSTEM[name], name
    f = resource.spec.field(name)
    column = resource.table.column_for(name) if f is not None else None
    if f is None or column is None or f.multiple or f.type in _NOT_COMPARABLE:
        return None
    return f, column.name


_NOT_COMPARABLE = frozenset({FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD})


def _convert(f: Field, raw: Any) -> tuple[Any, ...]:
    """``raw`` as the column's value, or nothing when it does not convert."""
    text = _text(raw)
    if text is None:
        return ()
    try:
        value = fieldvalues.from_text(f, text)
    except fieldvalues.InvalidValueError:
        return ()
    if f is queries.SYSTEM["docstatus"]:
        value = tables.DOCSTATUS.index(value)
    return (value,)


def bind(rules: tuple[Rule, ...], resource: Resource, identity: Identity) -> tuple[Bound, ...]:
    """Resolve ``rules`` for one caller; each becomes one SQL-ready condition."""
    out: list[Bound] = []
    for rule in rules:
        found = target(resource, rule.field)
        if found is None:  # a field that cannot be compared: fail closed
            out.append(Bound(rule.field, "id", FilterOp.IN, (), rule))
            continue
        f, column = found
        out.append(Bound(rule.field, column, *_resolve(rule, f, identity), rule))
    return tuple(out)


def _resolve(rule: Rule, f: Field, identity: Identity) -> tuple[FilterOp, tuple[Any, ...]]:
    op = rule.op
    if rule.source is Source.CONSTANT:
        if op in (FilterOp.NULL, FilterOp.NOTNULL):
            return op, ()
        parts = (
            (rule.value or "").split(",")
            if op in (FilterOp.IN, FilterOp.NIN, FilterOp.BETWEEN)
            else [rule.value]
        )
        raw: tuple[Any, ...] = tuple(parts)
    else:
        raw = identity.values(rule.attr or "")
    values = tuple(v for item in raw for v in _convert(f, item))
    if len(values) != len(raw) and rule.source is Source.CONSTANT:
        return FilterOp.IN, ()  # a literal that does not fit its field matches nothing
    if op in _MEMBERSHIP:
        return FilterOp.IN, values
    if op in _EXCLUSION and values:
        return FilterOp.NIN, values
    if op in _SINGLE and len(values) == 1:
        return op, values
    if op is FilterOp.BETWEEN and len(values) == 2:
        return op, values
    return FilterOp.IN, ()


def conditions(bound: tuple[Bound, ...]) -> tuple[queries.Condition, ...]:
    """The SQL conditions of a bound scope (``sql`` renders them like list filters)."""
    return tuple(queries.Condition(b.column, b.op, b.values) for b in bound)


def admits(b: Bound, value: Any) -> bool:
    """Whether a record whose field holds ``value`` satisfies ``b`` (SQL's meaning: NULL never does)."""
    if b.op is FilterOp.NULL:
        return value is None
    if value is None:
        return False
    try:
        if b.op is FilterOp.IN:
            return value in b.values
        if b.op is FilterOp.NIN:
            return value not in b.values
        if b.op is FilterOp.NOTNULL:
            return True
        if b.op is FilterOp.BETWEEN:
            return bool(b.values[0] <= value <= b.values[1])
        if b.op in (FilterOp.LIKE, FilterOp.ILIKE):
            flags = re.IGNORECASE if b.op is FilterOp.ILIKE else 0
            return re.fullmatch(_like(str(b.values[0])), str(value), flags | re.DOTALL) is not None
        return _COMPARE[b.op](value, b.values[0])
    except TypeError:
        return False


def _like(pattern: str) -> str:
    return "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)


def refusals(bound: tuple[Bound, ...], values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, message)`` for each condition the values to be written break.

    Only fields present in ``values`` are judged: an update leaves the others as they are, and
    the record was in scope when it was locked.
    """
    out: list[tuple[str, str]] = []
    for b in bound:
        if b.field in values and not admits(b, values[b.field]):
            out.append((b.field, _why(b)))
    return out


def _why(b: Bound) -> str:
    whose = f"your {b.rule.attr}" if b.rule.attr else "the entity's fixed filter"
    if b.nothing:
        if b.rule.source is Source.CONSTANT:
            return "the entity's fixed filter on this field cannot be met"
        return f"your identity carries no usable {b.rule.attr}, so no value is in your row scope"
    shown = ", ".join(str(fieldvalues.to_json(queries.SYSTEM["id"], v)) for v in b.values)
    if b.op is FilterOp.IN:
        return f"must be {shown} ({whose})" if len(b.values) == 1 else f"must be one of {shown} ({whose})"
    if b.op is FilterOp.NIN:
        return f"must not be {shown} ({whose})"
    if b.op in (FilterOp.NULL, FilterOp.NOTNULL):
        return f"must be {'empty' if b.op is FilterOp.NULL else 'set'} (the entity's fixed filter)"
    return f"must be {b.op} {shown} ({whose})"
