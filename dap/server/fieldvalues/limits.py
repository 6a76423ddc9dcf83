"""What a field's value may be, whatever it came from: text Postgres can store, lengths, choices,
the scale and precision of exact numbers. Pure.

Every way into the value model (``parsing`` for JSON, ``texts`` for text, ``computed`` for
formulas and auto-fill) checks a value against these, so a limit is declared once.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.storage import tables

EXACT = (FieldType.DECIMAL, FieldType.MONEY, FieldType.PERCENT)
TEXTUAL = (FieldType.STRING, FieldType.TEXT, FieldType.RICHTEXT, FieldType.FILE, FieldType.ENUM)
JSON_HELD = (FieldType.JSON, FieldType.ATTACHMENT)

# A btree index entry holds at most about 2700 bytes; 500 characters of UTF-8 (at most 4 bytes
# each) always fit beside the tenant id. Unindexed short strings get a generous default bound so
# that a careless client cannot store megabytes in a ``string`` field; ``text`` is bounded only by
# the body size.
INDEXED_STRING_MAX = 500
STRING_MAX = 10_000


class InvalidValueError(ValueError):
    """One value does not fit its field."""


def check_text(value: str) -> None:
    """Refuse what Postgres text cannot store: NUL and lone surrogates (both survive JSON parsing)."""
    if "\x00" in value:
        raise InvalidValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValueError("must be valid Unicode text") from exc


def text_limit(f: Field) -> int | None:
    """The most characters a value of ``f`` may have before its declared rules run.

    An indexed field is bounded by what the index can hold, whatever it declares. A ``string``
    field that declares a ``max_length`` rule is bounded by that rule (with its own message).
    """
    if f.index or f.unique:
        return INDEXED_STRING_MAX
    if f.type is FieldType.STRING and not any(r.rule == "max_length" for r in f.rules):
        return STRING_MAX
    return None


def allowed_values(f: Field) -> tuple[Any, ...]:
    if f.options:
        return tuple(o.value for o in f.options)
    return tuple(f.enum_values)


def refusal(choices: tuple[Any, ...]) -> str:
    """The message of a value that is none of ``choices``."""
    return f"must be one of {', '.join(map(str, choices))}"


def scale_of(f: Field) -> int | None:
    """The decimal places an exact field holds (money: two unless declared)."""
    scale = f.scale_digits
    if scale is None and f.type is FieldType.MONEY:
        return tables.DEFAULT_MONEY_SCALE
    return scale


def precision_of(f: Field) -> int | None:
    """The significant digits an exact field holds (money: the column's default unless declared)."""
    return f.precision or (tables.DEFAULT_MONEY_PRECISION if f.type is FieldType.MONEY else None)


def quantum_of(f: Field) -> Decimal | None:
    """``10 ** -scale`` of an exact field, what its values are quantized to (``None``: no scale)."""
    scale = scale_of(f)
    return None if scale is None else Decimal(1).scaleb(-scale)


def finite(number: Decimal) -> Decimal:
    if not number.is_finite():
        raise InvalidValueError("must be a finite number")
    return number


def compare(value: Any, bound: Any) -> int:
    """-1, 0, 1 of a column value against a manifest's ``min``/``max`` bound (ISO text for dates,
    any number for numbers, compared exactly); raises TypeError or ValueError when the two
    cannot be ordered."""
    if isinstance(value, dt.date) and isinstance(bound, str):
        bound = (dt.datetime if isinstance(value, dt.datetime) else dt.date).fromisoformat(bound)
        if isinstance(bound, dt.datetime) and bound.tzinfo is None:
            bound = bound.replace(tzinfo=dt.UTC)
    elif isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        value = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        bound = Decimal(str(bound))
    return -1 if value < bound else (1 if value > bound else 0)
