"""One JSON value of a field (what a client sends) → the column's Python value. Pure.

Bodies are parsed with ``parse_float=Decimal`` (:data:`EXACT_JSON`), so that ``12.30`` never
passes through a float; the value that comes out is what asyncpg binds for the field's column
(its SQL parameter): ``Decimal`` for exact numbers, ``date``/``datetime``/``time``, ``UUID``,
``int``, ``float``, ``bool``, ``str``, plain JSON for ``json`` and ``attachment``.
``InvalidValueError`` carries the one message a caller puts in its problem document.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.fieldvalues import limits
from dap.server.fieldvalues.limits import InvalidValueError, check_text

_T = TypeVar("_T")
EXACT_JSON = json.JSONDecoder(parse_float=Decimal)  # made once: ``json.loads`` makes one per call
_CELL_JSON = json.JSONDecoder(parse_float=Decimal, parse_constant=Decimal)


def exact_json(text: str) -> Any:
    """JSON text as a body is read: numbers with a fraction as ``Decimal``."""
    return EXACT_JSON.decode(text)


def exact_json_of_cell(text: str) -> Any:
    """JSON text of a CSV cell or a stored body: NaN and Infinity come back as ``Decimal`` too, for
    the validation to refuse as not finite (never a float)."""
    return _CELL_JSON.decode(text)


def exact_floats(value: Any) -> Any:
    """JSON data whose numbers came as floats (a protobuf ``Value``) with them as a body holds them:
    whole ones as ``int``, others as the ``Decimal`` of their shortest text."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else Decimal(repr(value))
    if isinstance(value, list):
        return [exact_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: exact_floats(v) for k, v in value.items()}
    return value


def decimal_of(value: Any) -> Decimal:
    """A body's exact number (a JSON number, parsed as ``Decimal``, or a string) as a finite ``Decimal``."""
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal):
        raise InvalidValueError("expected a decimal number (a JSON number or a string)")
    try:
        number = Decimal(value) if not isinstance(value, Decimal) else value
    except InvalidOperation as exc:
        raise InvalidValueError(f"{value!r} is not a decimal number") from exc
    if not number.is_finite():  # inline, not limits.finite: every exact value of a body passes here
        raise InvalidValueError("must be a finite number")
    return number


def one_value(f: Field, value: Any) -> Any:
    """Coerce one JSON value (not a list of a ``multiple`` field) to the column's Python value."""
    t = f.type
    if t in limits.TEXTUAL or t is FieldType.INTEGER or t in limits.EXACT:
        return coercer(f)(value)
    if t is FieldType.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise InvalidValueError("expected a number")
        number = float(value)
        if not math.isfinite(number):
            raise InvalidValueError("must be a finite number")
        return number
    if t is FieldType.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidValueError("expected true or false")
        return value
    if t in _ISO:
        return _ISO[t](value)
    if t in (FieldType.UUID, FieldType.RELATION):
        return uuid_of(value)
    if t in limits.JSON_HELD:
        choices = limits.allowed_values(f)
        if choices and value not in choices:
            raise InvalidValueError(limits.refusal(choices))
        return plain_json(value)
    raise InvalidValueError(f"fields of type {t} cannot be set directly")


def _iso(parse: Callable[[str], _T], value: Any, expected: str) -> _T:
    """``value`` read by ``parse`` (a ``fromisoformat``), or refused as not ``expected``."""
    if not isinstance(value, str):
        raise InvalidValueError(f"expected {expected}")
    try:
        return parse(value)
    except ValueError as exc:
        raise InvalidValueError(f"expected {expected}") from exc


def date_of(value: Any) -> dt.date:
    """An ISO 8601 date (``YYYY-MM-DD``) that is not a field's value: a period's bounds, say."""
    return _iso(dt.date.fromisoformat, value, "an ISO 8601 date (YYYY-MM-DD)")


def _date(value: Any) -> dt.date:
    if value in ("today", "today()"):
        return dt.date.today()
    return date_of(value)


def _datetime(value: Any) -> dt.datetime:
    """Naive means UTC."""
    if not isinstance(value, str):
        raise InvalidValueError("expected an ISO 8601 date-time")
    parsed = _iso(dt.datetime.fromisoformat, value, "an ISO 8601 date-time such as 2024-05-01T12:00:00Z")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _time(value: Any) -> dt.time:
    return _iso(dt.time.fromisoformat, value, "an ISO 8601 time (HH:MM[:SS])")


_ISO: dict[FieldType, Callable[[Any], Any]] = {
    FieldType.DATE: _date,
    FieldType.DATETIME: _datetime,
    FieldType.TIME: _time,
}


def uuid_of(value: Any) -> uuid.UUID:
    """A uuid string (a ``uuid`` or ``relation`` field's value) as a ``UUID``."""
    if not isinstance(value, str):
        raise InvalidValueError("expected a uuid string")
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise InvalidValueError("expected a uuid") from exc


# --- one coercion per field, chosen once -----------------------------------------------------
# :func:`coercer` makes the choice of a field's type, text limit, choices and scale once per field
# (fields are frozen declarations) for the types a record's body carries most -- text, integers,
# exact numbers -- and keeps :func:`one_value` for the others. Kept by the field's id with the field.
_COERCERS: dict[int, tuple[Field, Callable[[Any], Any]]] = {}
MAX_COERCERS = 8192


def coercer(f: Field) -> Callable[[Any], Any]:
    """The JSON value → column value function of field ``f`` (one value: not a ``multiple``'s list)."""
    found = _COERCERS.get(id(f))
    if found is not None and found[0] is f:
        return found[1]
    if len(_COERCERS) >= MAX_COERCERS:
        _COERCERS.clear()
    made = _made(f)
    _COERCERS[id(f)] = (f, made)
    return made


def _made(f: Field) -> Callable[[Any], Any]:
    t = f.type
    if t in limits.TEXTUAL:
        return _text_coercer(f)
    if t is FieldType.INTEGER:
        return integer
    if t in limits.EXACT:
        return _exact_coercer(f)
    if t in _ISO:  # dates and times: straight to their reader, past one_value's choice of type
        return _ISO[t]
    return lambda value: one_value(f, value)


def _text_coercer(f: Field) -> Callable[[Any], Any]:
    limit = limits.text_limit(f)
    why = " (the field is indexed)" if f.index or f.unique else ""
    choices = limits.allowed_values(f)
    refusal = limits.refusal(choices) if choices else ""

    def text(value: Any) -> Any:
        if not isinstance(value, str):
            raise InvalidValueError("expected a string")
        check_text(value)
        if limit is not None and len(value) > limit:
            raise InvalidValueError(f"at most {limit} characters{why}, got {len(value)}")
        if choices and value not in choices:
            raise InvalidValueError(refusal)
        return value

    return text


def integer(value: Any) -> int:
    """A JSON integer (or an integral JSON number, ``17.0``) within the 64-bit column's range."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
            value = int(value)
        else:
            raise InvalidValueError("expected an integer")
    number: int = value
    if not -(2**63) <= number < 2**63:
        raise InvalidValueError("out of the 64-bit integer range")
    return number


def _exact_coercer(f: Field) -> Callable[[Any], Any]:
    precision = limits.precision_of(f)
    quantum = limits.quantum_of(f)
    if quantum is None:  # no scale: any places, the digits bounded by the precision alone

        def unscaled(value: Any) -> Decimal:
            number = decimal_of(value)
            if precision is not None and len(number.as_tuple().digits) > precision:
                raise InvalidValueError(f"at most {precision} significant digits")
            return number

        return unscaled
    scale = -quantum.as_tuple().exponent  # type: ignore[operator]
    places = f"at most {scale} decimal places"

    def exact(value: Any) -> Decimal:
        number = decimal_of(value)
        try:
            held = number.quantize(quantum)
        except InvalidOperation as exc:
            raise InvalidValueError("too large") from exc
        if held != number:  # only when it had more places than the scale: quantizing up is exact
            raise InvalidValueError(places)
        # the digits of a number of exponent -scale: adjusted() - exponent + 1 (zero: one digit)
        if precision is not None and held.adjusted() + scale + 1 > precision:
            raise InvalidValueError(f"at most {precision} significant digits")
        return held

    return exact


def plain_json(value: Any) -> Any:
    """Free JSON as stored in jsonb: numbers stay numbers (bodies are parsed with Decimal)."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidValueError("numbers must be finite")
        return int(value) if value == value.to_integral_value() and "E" not in str(value) else float(value)
    if isinstance(value, list):
        return [plain_json(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, str):
        check_text(value)
    return value
