"""Computed and copied values → the column value of their field. Pure.

A formula's result (``deriving``) or a value copied from a related record (auto_fill) arrives as
whatever the expression language or asyncpg produced: ints, Decimals, floats, strings, dates. It is
converted to its field's type here — decimal, money and percent exact and quantised to the field's
scale with ROUND_HALF_UP (the rule of the language's ``round()``), integers rounded the same way,
precision checked — and otherwise through ``records.coerce``, so the stored value is what a client
could have sent. ``InvalidValueError`` says why a value does not fit.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.storage import records, tables

_EXACT = (FieldType.DECIMAL, FieldType.MONEY, FieldType.PERCENT)
_TEXTUAL = (FieldType.STRING, FieldType.TEXT, FieldType.RICHTEXT, FieldType.FILE, FieldType.ENUM)


def _quantum(f: Field) -> Decimal | None:
    scale = f.scale_digits
    if scale is None and f.type is FieldType.MONEY:
        scale = tables.DEFAULT_MONEY_SCALE
    return None if scale is None else Decimal(1).scaleb(-scale)


def _exact(f: Field, value: Any) -> Decimal:
    if isinstance(value, bool):
        raise records.InvalidValueError("expected a number, got a boolean")
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, TypeError, ValueError) as exc:
        raise records.InvalidValueError(f"expected a number, got {value!r}") from exc
    if not number.is_finite():
        raise records.InvalidValueError("must be a finite number")
    quantum = _quantum(f)
    try:
        if quantum is not None:
            number = number.quantize(quantum, rounding=ROUND_HALF_UP)
    except InvalidOperation as exc:
        raise records.InvalidValueError("too large") from exc
    precision = f.precision or (tables.DEFAULT_MONEY_PRECISION if f.type is FieldType.MONEY else None)
    if precision is not None and len(number.as_tuple().digits) > precision:
        raise records.InvalidValueError(f"{number} does not fit {precision} significant digits")
    return number


def _one(f: Field, value: Any) -> Any:
    t = f.type
    if t in _EXACT:
        return _exact(f, value)
    if t is FieldType.INTEGER:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise records.InvalidValueError(f"expected a number, got {value!r}")
        if not isinstance(value, int):
            try:
                value = int(
                    Decimal(repr(value) if isinstance(value, float) else value).quantize(1, ROUND_HALF_UP)
                )
            except (InvalidOperation, ValueError) as exc:
                raise records.InvalidValueError("must be a finite number") from exc
        return records.coerce(f, value)
    if t is FieldType.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise records.InvalidValueError(f"expected a number, got {value!r}")
        return records.coerce(f, value)
    if t in _TEXTUAL:
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | Decimal):
            value = format(value, "f") if isinstance(value, Decimal) else str(value)
        elif isinstance(value, dt.date | dt.time | uuid.UUID):
            value = str(value) if isinstance(value, uuid.UUID) else value.isoformat()
        return records.coerce(f, value)
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
    if t in (FieldType.JSON, FieldType.ATTACHMENT):
        return records.plain_json(_plain(value))
    if t is FieldType.CHILD:
        raise records.InvalidValueError("a child field cannot hold a computed or copied value")
    return records.coerce(f, value)


def convert(f: Field, value: Any) -> Any:
    """The column value of ``f`` for a computed or copied ``value``; raises ``InvalidValueError``."""
    if value is None:
        return None
    if f.multiple and f.type not in (FieldType.JSON, FieldType.ATTACHMENT):
        if not isinstance(value, list | tuple):
            raise records.InvalidValueError("expected a list of values")
        return [records.to_json(f, _one(f, v), single=True) for v in value]
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
    if value is None or f.type in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD) or f.multiple:
        return value
    try:
        return records.coerce(f, value)
    except records.InvalidValueError:
        return value
