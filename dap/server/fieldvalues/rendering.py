"""Column values → what they are shown as: JSON (REST, gRPC through it, events, the CSV export's
cells, which the UI writes from that JSON). Pure.

Decimal, money and percent as exact strings with their scale, dates and times as ISO 8601, uuids
as strings, masked fields as ``"****"``; everything else is JSON already. The SQL form of a value
is the column value itself (``parsing``'s output, bound by asyncpg).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.fieldvalues import limits

MASK = "****"


def to_json(f: Field, value: Any, *, single: bool = False) -> Any:
    """The JSON form of a column value."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def present(f: Field, value: Any) -> Any:
    """The JSON of a stored value as a REST response shows it (masking applied)."""
    if f.masked and value is not None:
        return MASK
    return to_json(f, value)


def _decimal(value: Decimal) -> str:
    return format(value, "f")


def _iso(value: dt.date | dt.time) -> str:
    return iso_text(value) if isinstance(value, dt.date) else value.isoformat()


def iso_text(value: dt.date) -> str:
    """``value.isoformat()`` of a date or timestamp, written by orjson: the same text (RFC 3339,
    microseconds only when set, the offset as ``+HH:MM``) in a quarter of the time, which a page
    of rows feels. Not for ``time`` values: orjson 3.13 drops the leading zeros of their
    microseconds (``06:47:01.72513``), which the test of this function catches."""
    return orjson.dumps(value)[1:-1].decode()


def converter(f: Field) -> Callable[[Any], Any] | None:
    """The column value → JSON conversion of ``f`` (``None``: the value is JSON already).

    Chosen once per field when the catalog is built, so answering a row is one call per field.
    """
    if f.masked:
        return lambda v: MASK if v is not None else None
    if f.multiple or f.type in (*limits.JSON_HELD, FieldType.CHILD):
        return None
    if f.type in limits.EXACT:
        return _decimal
    if f.type in (FieldType.DATE, FieldType.DATETIME, FieldType.TIME):
        return _iso
    if f.type in (FieldType.UUID, FieldType.RELATION):
        return str
    return None
