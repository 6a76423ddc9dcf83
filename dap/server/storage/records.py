"""Field values in and out: coercion and validation per FieldType. Pure.

Input arrives either as JSON (request bodies, parsed with ``parse_float=Decimal`` so that
``12.30`` never passes through a float) or as text (query strings). Both paths produce the Python
value asyncpg binds for the field's column. Output turns column values back into JSON: decimal,
money and percent as exact strings with their scale, dates and times as ISO 8601, uuids as
strings, masked fields as ``"****"``.

``InvalidValueError`` carries one message; the callers collect them into a 422 (bodies) or 400 (queries)
problem document, one entry per offending field.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.storage import numbering, tables

MASK = "****"
_EXACT = (FieldType.DECIMAL, FieldType.MONEY, FieldType.PERCENT)
_TEXTUAL = (FieldType.STRING, FieldType.TEXT, FieldType.RICHTEXT, FieldType.FILE, FieldType.ENUM)


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


# A btree index entry holds at most about 2700 bytes; 500 characters of UTF-8 (at most 4 bytes
# each) always fit beside the tenant id. Unindexed short strings get a generous default bound so
# that a careless client cannot store megabytes in a ``string`` field; ``text`` is bounded only by
# the body size.
INDEXED_STRING_MAX = 500
STRING_MAX = 10_000


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


def _finite_decimal(value: Any) -> Decimal:
    """A body's exact number (a JSON number, parsed as ``Decimal``, or a string) as a finite ``Decimal``."""
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal):
        raise InvalidValueError("expected a decimal number (a JSON number or a string)")
    try:
        number = Decimal(value) if not isinstance(value, Decimal) else value
    except InvalidOperation as exc:
        raise InvalidValueError(f"{value!r} is not a decimal number") from exc
    if not number.is_finite():
        raise InvalidValueError("must be a finite number")
    return number


def _exact(f: Field, value: Any) -> Decimal:
    number = _finite_decimal(value)
    scale = f.scale_digits
    if scale is None and f.type is FieldType.MONEY:
        scale = tables.DEFAULT_MONEY_SCALE
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    if scale is not None and -exponent > scale:
        try:
            exact = number == number.quantize(Decimal(1).scaleb(-scale))
        except InvalidOperation as exc:
            raise InvalidValueError("too large") from exc
        if not exact:
            raise InvalidValueError(f"at most {scale} decimal places")
    if scale is not None:
        try:
            number = number.quantize(Decimal(1).scaleb(-scale))
        except InvalidOperation as exc:
            raise InvalidValueError("too large") from exc
    precision = f.precision or (tables.DEFAULT_MONEY_PRECISION if f.type is FieldType.MONEY else None)
    if precision is not None:
        digits = len(number.as_tuple().digits)
        if digits > precision:
            raise InvalidValueError(f"at most {precision} significant digits")
    return number


def _one(f: Field, value: Any) -> Any:
    """Coerce one JSON value (not a list of a ``multiple`` field) to the column's Python value."""
    t = f.type
    if t in _TEXTUAL:
        if not isinstance(value, str):
            raise InvalidValueError("expected a string")
        check_text(value)
        limit = text_limit(f)
        if limit is not None and len(value) > limit:
            why = " (the field is indexed)" if f.index or f.unique else ""
            raise InvalidValueError(f"at most {limit} characters{why}, got {len(value)}")
        choices = allowed_values(f)
        if choices and value not in choices:
            raise InvalidValueError(f"must be one of {', '.join(map(str, choices))}")
        return value
    if t is FieldType.INTEGER:
        return _integer(value)
    if t in _EXACT:
        return _exact(f, value)
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
    if t is FieldType.DATE:
        if not isinstance(value, str):
            raise InvalidValueError("expected an ISO 8601 date (YYYY-MM-DD)")
        if value in ("today", "today()"):
            return dt.date.today()
        try:
            return dt.date.fromisoformat(value)
        except ValueError as exc:
            raise InvalidValueError("expected an ISO 8601 date (YYYY-MM-DD)") from exc
    if t is FieldType.DATETIME:
        if not isinstance(value, str):
            raise InvalidValueError("expected an ISO 8601 date-time")
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidValueError("expected an ISO 8601 date-time such as 2024-05-01T12:00:00Z") from exc
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    if t is FieldType.TIME:
        if not isinstance(value, str):
            raise InvalidValueError("expected an ISO 8601 time (HH:MM[:SS])")
        try:
            return dt.time.fromisoformat(value)
        except ValueError as exc:
            raise InvalidValueError("expected an ISO 8601 time (HH:MM[:SS])") from exc
    if t in (FieldType.UUID, FieldType.RELATION):
        if not isinstance(value, str):
            raise InvalidValueError("expected a uuid string")
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            raise InvalidValueError("expected a uuid") from exc
    if t in (FieldType.JSON, FieldType.ATTACHMENT):
        choices = allowed_values(f)
        if choices and value not in choices:
            raise InvalidValueError(f"must be one of {', '.join(map(str, choices))}")
        return plain_json(value)
    raise InvalidValueError(f"fields of type {t} cannot be set directly")


# --- one coercion per field, chosen once -----------------------------------------------------
# A body's value is coerced by :func:`_one`, which finds the field's type, its text limit and its
# choices again at every call. :func:`coercer` makes that choice once per field (fields are frozen
# declarations) for the types a record's body carries most -- text, integers, exact numbers -- and
# keeps :func:`_one` for the others; it answers exactly what :func:`_one` answers, values and
# messages (a test compares the two). Kept by the field's id with the field itself.
_COERCERS: dict[int, tuple[Field, Callable[[Any], Any]]] = {}
MAX_COERCERS = 8192


def coercer(f: Field) -> Callable[[Any], Any]:
    """:func:`_one` of field ``f``, as one function chosen for ``f``."""
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
    if t in _TEXTUAL:
        return _text_coercer(f)
    if t is FieldType.INTEGER:
        return _integer
    if t in _EXACT:
        return _exact_coercer(f)
    return lambda value: _one(f, value)


def _text_coercer(f: Field) -> Callable[[Any], Any]:
    limit = text_limit(f)
    why = " (the field is indexed)" if f.index or f.unique else ""
    choices = allowed_values(f)
    refusal = f"must be one of {', '.join(map(str, choices))}" if choices else ""

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


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, Decimal) and value == value.to_integral_value():
            value = int(value)
        else:
            raise InvalidValueError("expected an integer")
    if not -(2**63) <= value < 2**63:
        raise InvalidValueError("out of the 64-bit integer range")
    return value


def _exact_coercer(f: Field) -> Callable[[Any], Any]:
    scale = f.scale_digits
    if scale is None and f.type is FieldType.MONEY:
        scale = tables.DEFAULT_MONEY_SCALE
    if scale is None:  # no quantum to hold it to: as _exact does it
        return lambda value: _exact(f, value)
    quantum = Decimal(1).scaleb(-scale)
    precision = f.precision or (tables.DEFAULT_MONEY_PRECISION if f.type is FieldType.MONEY else None)
    places = f"at most {scale} decimal places"

    def exact(value: Any) -> Decimal:
        number = _finite_decimal(value)
        try:  # _exact quantizes twice when there are more places than the scale; once is the same
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
    if f.multiple and f.type not in (FieldType.JSON, FieldType.ATTACHMENT):
        if not isinstance(value, list):
            raise InvalidValueError("expected a list of values")
        return [to_json(f, _one(f, v), single=True) for v in value]
    return coercer(f)(value)


def from_text(f: Field, text: str) -> Any:
    """The column value for query-string ``text`` of field ``f`` (filters)."""
    t = f.type
    if t is FieldType.INTEGER:
        try:
            return _one(f, int(text))
        except ValueError as exc:
            raise InvalidValueError("expected an integer") from exc
    if t in _EXACT:
        return _exact(f, text)
    if t is FieldType.NUMBER:
        try:
            return float(text)
        except ValueError as exc:
            raise InvalidValueError("expected a number") from exc
    if t is FieldType.BOOLEAN:
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise InvalidValueError("expected true or false")
    if t in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD) or f.multiple:
        raise InvalidValueError("fields holding JSON can only be filtered with null or notnull")
    return _one(f, text)


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


class InvalidRowError(ValueError):
    """A record body has offending fields: ``problems`` lists ``(path, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = problems


def default_of(f: Field) -> Any:
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


# :func:`coerce_row`'s fields by name, the :func:`coercer` of each that holds one value (what
# :func:`coerce` calls for it), and those a create must look at when the body leaves them out (a
# default, or required and not filled by the server), per fields object (a resource's, a child
# table's, an extension's, an action's parameters: fixed for a catalog), kept with it.
_RowPlan = tuple[Mapping[str, Field], Mapping[str, Callable[[Any], Any]], tuple[tuple[str, Field], ...]]
_ROW_PLANS: dict[int, tuple[object, _RowPlan]] = {}


def _row_plan(fields: tuple[Field, ...] | Mapping[str, Field]) -> _RowPlan:
    found = _ROW_PLANS.get(id(fields))
    if found is not None and found[0] is fields:
        return found[1]
    by_name = dict(fields) if isinstance(fields, Mapping) else {f.name: f for f in fields if not f.removed}
    direct = {
        name: coercer(f)
        for name, f in by_name.items()
        if f.type is not FieldType.CHILD
        and not (f.multiple and f.type not in (FieldType.JSON, FieldType.ATTACHMENT))
    }
    unset = tuple(
        (name, f)
        for name, f in by_name.items()
        if f.computed is None and (f.default is not None or (f.required and not server_fills(f)))
    )
    if len(_ROW_PLANS) >= MAX_COERCERS:
        _ROW_PLANS.clear()
    plan = _ROW_PLANS[id(fields)] = (fields, (by_name, direct, unset))
    return plan[1]


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
    if f.multiple or f.type in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD):
        return None
    if f.type in _EXACT:
        return _decimal
    if f.type in (FieldType.DATE, FieldType.DATETIME, FieldType.TIME):
        return _iso
    if f.type in (FieldType.UUID, FieldType.RELATION):
        return str
    return None


def present(f: Field, value: Any) -> Any:
    """The JSON of a stored value as a REST response shows it (masking applied)."""
    if f.masked and value is not None:
        return MASK
    return to_json(f, value)
