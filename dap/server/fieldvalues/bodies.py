"""A body's values → column values: one field's (lists of a ``multiple`` field, child rows
included) and a whole record's, every problem collected. Pure.

``coerce_row`` is what a create, an update, an action's parameters and the bridge's writes run;
``InvalidRowError`` lists ``(path, message)`` for the caller's 422 problem document.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.fieldvalues import limits, parsing, rendering
from dap.server.fieldvalues.limits import InvalidValueError
from dap.server.storage import numbering


class InvalidRowError(ValueError):
    """A record body has offending fields: ``problems`` lists ``(path, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = problems


def _listed(f: Field) -> bool:
    """Whether ``f`` holds a list of values of its type (``json`` and ``attachment`` hold JSON)."""
    return bool(f.multiple) and f.type not in limits.JSON_HELD


def coerce(f: Field, value: Any, *, child_fields: tuple[Field, ...] = ()) -> Any:
    """The column value for JSON ``value`` of field ``f``; ``None`` stays ``None``."""
    if value is None:
        return None
    if f.type is FieldType.CHILD:
        if not isinstance(value, list):
            raise InvalidValueError("expected a list of rows")
        rows = []
        for i, row in enumerate(value):
            if not isinstance(row, dict):
                raise InvalidValueError(f"row {i}: expected an object")
            try:
                rows.append(coerce_row(child_fields, row, partial=False))
            except InvalidRowError as exc:
                first = exc.problems[0]
                raise InvalidValueError(f"row {i}: {first[0]}: {first[1]}") from exc
        return rows
    if _listed(f):
        if not isinstance(value, list):
            raise InvalidValueError("expected a list of values")
        return [rendering.to_json(f, parsing.one_value(f, v), single=True) for v in value]
    return parsing.coercer(f)(value)


def default_of(f: Field) -> Any:
    """The column value of ``f``'s declared default (``today`` and ``now`` as of this call)."""
    if f.default is None:
        return None
    if f.type is FieldType.DATE and f.default in ("today", "today()"):
        return dt.date.today()
    if f.type is FieldType.DATETIME and f.default in ("now", "now()"):
        return dt.datetime.now(dt.UTC)
    return coerce(f, f.default)


def server_fills(f: Field) -> bool:
    """Whether the server fills a missing ``f`` (auto_fill, generated natural key; see ``deriving``)."""
    return f.auto_fill is not None or numbering.generates(f)


def coerce_row(
    fields: tuple[Field, ...] | Mapping[str, Field],
    body: Mapping[str, Any],
    *,
    partial: bool,
    children: Mapping[str, tuple[Field, ...]] | None = None,
    reserved: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Validate a whole body: every problem is collected, then ``InvalidRowError`` is raised once.

    ``partial`` (PATCH) skips required and default handling and refuses immutable fields.
    Returns field name → column value for the fields present (plus defaults on create).
    """
    by_name, direct, unset = _row_plan(fields)
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in reserved:
            problems.append((key, "is a system field and cannot be written"))
            continue
        f = by_name.get(key)
        if f is None:
            problems.append((key, "unknown field"))
            continue
        if f.read_only or f.computed is not None:
            problems.append((key, "is read-only"))
            continue
        if partial and f.immutable:
            problems.append((key, "is immutable and cannot be changed after create"))
            continue
        if f.required and (value is None or (isinstance(value, str) and not value.strip())):
            problems.append((key, "is required" if value is None else "is required and must not be blank"))
            continue
        try:
            convert = direct.get(key)
            if convert is not None and value is not None:
                out[key] = convert(value)
            else:
                out[key] = coerce(f, value, child_fields=(children or {}).get(key, ()))
        except InvalidValueError as exc:
            problems.append((key, str(exc)))
    if not partial:
        for name, f in unset:
            if name in out or name in body:
                continue
            if f.default is not None:
                try:
                    out[name] = default_of(f)
                except InvalidValueError as exc:
                    problems.append((name, f"default: {exc}"))
            elif f.required and not server_fills(f):  # checked once the server has filled it
                problems.append((name, "is required"))
    if problems:
        raise InvalidRowError(problems)
    return out


# :func:`coerce_row`'s fields by name, the :func:`parsing.coercer` of each that holds one value
# (what :func:`coerce` calls for it), and those a create must look at when the body leaves them
# out (a default, or required and not filled by the server), per fields object (a resource's, a
# child table's, an extension's, an action's parameters: fixed for a catalog), kept with it.
_RowPlan = tuple[Mapping[str, Field], Mapping[str, Callable[[Any], Any]], tuple[tuple[str, Field], ...]]
_ROW_PLANS: dict[int, tuple[object, _RowPlan]] = {}


def _row_plan(fields: tuple[Field, ...] | Mapping[str, Field]) -> _RowPlan:
    found = _ROW_PLANS.get(id(fields))
    if found is not None and found[0] is fields:
        return found[1]
    by_name = dict(fields) if isinstance(fields, Mapping) else {f.name: f for f in fields if not f.removed}
    direct = {
        name: parsing.coercer(f)
        for name, f in by_name.items()
        if f.type is not FieldType.CHILD and not _listed(f)
    }
    unset = tuple(
        (name, f)
        for name, f in by_name.items()
        if f.computed is None and (f.default is not None or (f.required and not server_fills(f)))
    )
    if len(_ROW_PLANS) >= parsing.MAX_COERCERS:
        _ROW_PLANS.clear()
    plan = _ROW_PLANS[id(fields)] = (fields, (by_name, direct, unset))
    return plan[1]
