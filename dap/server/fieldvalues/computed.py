"""Computed and copied values → the column value of their field. Pure.

A formula's result (``documents.deriving``) or a value copied from a related record (auto_fill)
arrives as whatever the expression language or asyncpg produced: ints, Decimals, floats, strings,
dates. It is converted to its field's type here -- decimal, money and percent exact and quantised
to the field's scale with ROUND_HALF_UP (the rule of the language's ``round()``), integers rounded
the same way, precision checked -- and otherwise as one value of a body (``parsing``; the items
of a ``multiple`` field one by one), so the stored value is what a client could have sent.
``InvalidValueError`` says why a value does not fit.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.fieldvalues import bodies, limits, parsing, rendering
from dap.server.fieldvalues.limits import InvalidValueError


def _decimal(value: Any) -> Decimal:
    """An int, a Decimal, a float (by its shortest text) or numeric text as a finite Decimal."""
    if isinstance(value, bool):
        raise InvalidValueError("expected a number, got a boolean")
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, TypeError, ValueError) as exc:
        raise InvalidValueError(f"expected a number, got {value!r}") from exc
    return limits.finite(number)


def _exact(f: Field, value: Any) -> Decimal:
    number = _decimal(value)
    quantum = limits.quantum_of(f)
    try:
        if quantum is not None:
            number = number.quantize(quantum, rounding=ROUND_HALF_UP)
    except InvalidOperation as exc:
        raise InvalidValueError("too large") from exc
    precision = limits.precision_of(f)
    if precision is not None and len(number.as_tuple().digits) > precision:
        raise InvalidValueError(f"{number} does not fit {precision} significant digits")
    return number


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise InvalidValueError(f"expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(_decimal(value).quantize(1, ROUND_HALF_UP))
    except (InvalidOperation, ValueError) as exc:
        raise InvalidValueError("must be a finite number") from exc


def _text(value: Any) -> Any:
    """Numbers, booleans, dates and ids as the text a string field holds of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return format(value, "f") if isinstance(value, Decimal) else str(value)
    if isinstance(value, dt.date | dt.time | uuid.UUID):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    return value


def _one(f: Field, value: Any) -> Any:
    t = f.type
    if t in limits.EXACT:
        return _exact(f, value)
    if t is FieldType.INTEGER:
        return parsing.one_value(f, _integer(value))
    if t is FieldType.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise InvalidValueError(f"expected a number, got {value!r}")
        return parsing.one_value(f, value)
    if t in limits.TEXTUAL:
        return parsing.one_value(f, _text(value))
    if t is FieldType.DATE and isinstance(value, dt.date):
        return value.date() if isinstance(value, dt.datetime) else value
    if t is FieldType.DATETIME and isinstance(value, dt.date):
        if not isinstance(value, dt.datetime):
            return dt.datetime.combine(value, dt.time(), dt.UTC)
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if t is FieldType.TIME and isinstance(value, dt.time):
        return value
    if t in (FieldType.UUID, FieldType.RELATION) and isinstance(value, uuid.UUID):
        return value
    if t in limits.JSON_HELD:
        return parsing.plain_json(_plain(value))
    if t is FieldType.CHILD:
        raise InvalidValueError("a child field cannot hold a computed or copied value")
    return parsing.one_value(f, value)


def convert(f: Field, value: Any) -> Any:
    """The column value of ``f`` for a computed or copied ``value``; raises ``InvalidValueError``."""
    if value is None:
        return None
    if f.multiple and f.type not in limits.JSON_HELD:
        if not isinstance(value, list | tuple):
            raise InvalidValueError("expected a list of values")
        return [rendering.to_json(f, _one(f, v), single=True) for v in value]
    return _one(f, value)


def _plain(value: Any) -> Any:
    """A context value as JSON-able data: uuids, dates and Decimals as text-free JSON values."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def stored_value(f: Field, value: Any) -> Any:
    """A value read back from jsonb (child rows stored as JSON) as the Python value of its field."""
    if value is None or f.type in (*limits.JSON_HELD, FieldType.CHILD) or f.multiple:
        return value
    try:
        return bodies.coerce(f, value)
    except InvalidValueError:
        return value
