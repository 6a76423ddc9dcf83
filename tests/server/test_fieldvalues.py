"""The value model as one table: field types x sources (a body's JSON, a query string's text, a
CSV cell, a computed value) x edge values, each row the column value it gives or the message
it is refused with; and properties that hold whatever the value: a value reads the same from
every source, and what is shown reads back as itself. Pure."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dap.config.fields import Field
from dap.server import fieldvalues

U = "6f1c3a9e-7b7d-4d7a-9a55-1b2c3d4e5f60"
UTC = dt.UTC


def F(**kw: Any) -> Field:
    return Field.model_validate({"name": "f", **kw})


def _json(f: Field, value: Any) -> Any:
    return fieldvalues.coerce(f, value)


def _text(f: Field, value: Any) -> Any:
    return fieldvalues.from_text(f, value)


def _cell(f: Field, value: Any) -> Any:  # an import's or a CSV seed file's cell, then validated
    return fieldvalues.coerce(f, fieldvalues.from_cell(f, value))


def _computed(f: Field, value: Any) -> Any:
    return fieldvalues.convert(f, value)


SOURCES: dict[str, Callable[[Field, Any], Any]] = {
    "json": _json,
    "text": _text,
    "cell": _cell,
    "computed": _computed,
}


class Refused:
    def __init__(self, message: str) -> None:
        self.message = message


INTEGER = {"type": "integer"}
DECIMAL = {"type": "decimal", "scale": 2, "precision": 5}
MONEY = {"type": "money"}
NUMBER = {"type": "number"}
BOOLEAN = {"type": "boolean"}
STRING = {"type": "string", "index": True}
ENUM = {"type": "enum", "enum_values": ["red", "green"]}
DATE = {"type": "date"}
DATETIME = {"type": "datetime"}
TIME = {"type": "time"}
UUID = {"type": "uuid"}
JSON = {"type": "json"}
TAGS = {"type": "string", "multiple": True}
COUNTS = {"type": "integer", "multiple": True}


def row(field: dict[str, Any], source: str, given: Any, expected: Any, id: str) -> Any:
    return pytest.param(field, source, given, expected, id=f"{field['type']}-{source}-{id}")


TABLE = [
    # integer: JSON takes an integral number; text and CSV cells read it as JSON would
    row(INTEGER, "json", 17, 17, "int"),
    row(INTEGER, "json", Decimal("17.0"), 17, "integral-decimal"),
    row(INTEGER, "json", Decimal("17.5"), Refused("expected an integer"), "fraction"),
    row(INTEGER, "json", True, Refused("expected an integer"), "boolean"),
    row(INTEGER, "json", "17", Refused("expected an integer"), "string"),
    row(INTEGER, "json", 2**63, Refused("out of the 64-bit integer range"), "past-64-bits"),
    row(INTEGER, "json", -(2**63), -(2**63), "lowest"),
    row(INTEGER, "text", "17", 17, "plain"),
    row(INTEGER, "text", "17.0", 17, "integral"),
    row(INTEGER, "text", "1e3", 1000, "exponent"),
    row(INTEGER, "text", "17.5", Refused("expected an integer"), "fraction"),
    row(INTEGER, "text", "abc", Refused("expected an integer"), "not-a-number"),
    row(INTEGER, "text", "NaN", Refused("expected an integer"), "nan"),
    row(INTEGER, "text", str(2**63), Refused("out of the 64-bit integer range"), "past-64-bits"),
    row(INTEGER, "cell", "17", 17, "plain"),
    row(INTEGER, "cell", "17.0", 17, "integral"),  # refused before (expected an integer)
    row(INTEGER, "cell", " 17 ", 17, "spaces"),
    row(INTEGER, "cell", "seventeen", Refused("expected an integer"), "words"),
    row(INTEGER, "computed", 17, 17, "int"),
    row(INTEGER, "computed", Decimal("2.5"), 3, "half-up"),
    row(INTEGER, "computed", -2.5, -3, "half-up-negative"),
    row(INTEGER, "computed", float("nan"), Refused("must be a finite number"), "nan"),
    row(INTEGER, "computed", "17", Refused("expected a number, got '17'"), "string"),
    # decimal (scale 2, precision 5): exact, held to the scale; computed values are rounded
    row(DECIMAL, "json", Decimal("12.3"), Decimal("12.30"), "quantized"),
    row(DECIMAL, "json", "12.30", Decimal("12.30"), "string"),
    row(DECIMAL, "json", 12, Decimal("12.00"), "int"),
    row(DECIMAL, "json", Decimal("12.345"), Refused("at most 2 decimal places"), "too-many-places"),
    row(DECIMAL, "json", Decimal("12.340"), Decimal("12.34"), "trailing-zero"),
    row(DECIMAL, "json", Decimal("1234.5"), Refused("at most 5 significant digits"), "too-many-digits"),
    row(DECIMAL, "json", 1.5, Refused("expected a decimal number"), "float"),
    row(DECIMAL, "json", "NaN", Refused("must be a finite number"), "nan"),
    row(DECIMAL, "json", "12,5", Refused("is not a decimal number"), "comma"),
    row(DECIMAL, "text", "12.3", Decimal("12.30"), "plain"),
    row(DECIMAL, "text", "-0.5", Decimal("-0.50"), "negative"),
    row(DECIMAL, "cell", "999.99", Decimal("999.99"), "largest"),
    row(DECIMAL, "cell", "1000.00", Refused("at most 5 significant digits"), "past-largest"),
    row(DECIMAL, "computed", 12.345, Decimal("12.35"), "float-half-up"),
    row(DECIMAL, "computed", Decimal("1234.5"), Refused("1234.50 does not fit 5 significant digits"), "big"),
    row(DECIMAL, "computed", True, Refused("expected a number, got a boolean"), "boolean"),
    # money: two places unless declared
    row(MONEY, "json", "10", Decimal("10.00"), "default-scale"),
    row(MONEY, "computed", 1 / 3, Decimal("0.33"), "third"),
    row(MONEY, "text", "0.005", Refused("at most 2 decimal places"), "past-scale"),
    # number: a float, finite
    row(NUMBER, "json", Decimal("1.5"), 1.5, "decimal"),
    row(NUMBER, "json", "1.5", Refused("expected a number"), "string"),
    row(NUMBER, "text", "1.5", 1.5, "plain"),
    row(NUMBER, "text", "nan", Refused("must be a finite number"), "nan"),
    row(NUMBER, "text", "x", Refused("expected a number"), "words"),
    row(NUMBER, "cell", "2.5", 2.5, "plain"),
    row(NUMBER, "computed", 3, 3.0, "int"),
    # boolean
    row(BOOLEAN, "json", True, True, "true"),
    row(BOOLEAN, "json", "true", Refused("expected true or false"), "string"),
    row(BOOLEAN, "text", "1", True, "one"),
    row(BOOLEAN, "text", "FALSE", False, "upper"),
    row(BOOLEAN, "text", "yes", Refused("expected true or false"), "yes"),
    row(BOOLEAN, "cell", "true", True, "true"),
    # string (indexed): what Postgres and the index can hold
    row(STRING, "json", "x" * 500, "x" * 500, "longest"),
    row(STRING, "json", "x" * 501, Refused("at most 500 characters (the field is indexed)"), "too-long"),
    row(STRING, "json", "a\x00b", Refused("must not contain NUL characters"), "nul"),
    row(STRING, "json", "\ud800", Refused("must be valid Unicode text"), "lone-surrogate"),
    row(STRING, "json", 17, Refused("expected a string"), "number"),
    row(STRING, "text", "hello", "hello", "plain"),
    row(STRING, "cell", " 17 ", " 17 ", "kept-as-written"),
    row(STRING, "computed", 17, "17", "int"),
    row(STRING, "computed", True, "true", "boolean"),
    row(STRING, "computed", Decimal("1.50"), "1.50", "decimal"),
    row(STRING, "computed", dt.date(2024, 5, 1), "2024-05-01", "date"),
    # enum
    row(ENUM, "json", "red", "red", "choice"),
    row(ENUM, "json", "blue", Refused("must be one of red, green"), "not-a-choice"),
    row(ENUM, "text", "green", "green", "choice"),
    # date, datetime, time: ISO 8601
    row(DATE, "json", "2024-05-01", dt.date(2024, 5, 1), "iso"),
    row(DATE, "json", "2024-13-01", Refused("expected an ISO 8601 date (YYYY-MM-DD)"), "no-month-13"),
    row(DATE, "json", 20240501, Refused("expected an ISO 8601 date (YYYY-MM-DD)"), "number"),
    row(DATE, "text", "2024-05-01", dt.date(2024, 5, 1), "iso"),
    row(DATE, "cell", "2024-02-29", dt.date(2024, 2, 29), "leap-day"),
    row(DATE, "computed", dt.datetime(2024, 5, 1, 23, 59, tzinfo=UTC), dt.date(2024, 5, 1), "from-datetime"),
    row(DATETIME, "json", "2024-05-01T12:00:00", dt.datetime(2024, 5, 1, 12, tzinfo=UTC), "naive-is-utc"),
    row(
        DATETIME,
        "text",
        "2024-05-01T12:00:00+02:00",
        dt.datetime(2024, 5, 1, 10, tzinfo=UTC),
        "offset",
    ),
    row(DATETIME, "json", "yesterday", Refused("expected an ISO 8601 date-time such as"), "words"),
    row(DATETIME, "computed", dt.date(2024, 5, 1), dt.datetime(2024, 5, 1, tzinfo=UTC), "from-date"),
    row(TIME, "json", "12:30", dt.time(12, 30), "minutes"),
    row(TIME, "cell", "25:00", Refused("expected an ISO 8601 time (HH:MM[:SS])"), "no-hour-25"),
    # uuid
    row(UUID, "json", U, uuid.UUID(U), "uuid"),
    row(UUID, "json", "nope", Refused("expected a uuid"), "not-a-uuid"),
    row(UUID, "json", 5, Refused("expected a uuid string"), "number"),
    row(UUID, "text", U.upper(), uuid.UUID(U), "upper"),
    row(UUID, "computed", uuid.UUID(U), uuid.UUID(U), "uuid"),
    # json: free JSON, numbers as JSON numbers; text and cells are JSON text
    row(JSON, "json", {"a": Decimal("1.5"), "b": Decimal("2.0")}, {"a": 1.5, "b": 2}, "numbers"),
    row(JSON, "json", [Decimal("Infinity")], Refused("numbers must be finite"), "infinite"),
    row(JSON, "cell", '{"a": [1, 2.5]}', {"a": [1, 2.5]}, "object"),
    row(JSON, "cell", "NaN", Refused("numbers must be finite"), "nan"),
    row(JSON, "cell", "{oops", Refused("expected JSON (as the export writes this field)"), "broken"),
    row(JSON, "text", "{}", Refused("can only be filtered with null or notnull"), "filter"),
    row(JSON, "computed", {"at": dt.date(2024, 5, 1), "n": Decimal(3)}, {"at": "2024-05-01", "n": 3}, "dt"),
    # multiple: a list of values of the type, stored as their JSON
    row(TAGS, "json", ["a", "b"], ["a", "b"], "list"),
    row(TAGS, "json", "a", Refused("expected a list of values"), "not-a-list"),
    row(TAGS, "cell", '["a", "b"]', ["a", "b"], "json-text"),
    row(TAGS, "computed", ("a", "b"), ["a", "b"], "tuple"),  # refused before: each item as a list
    row(COUNTS, "computed", [1.4, Decimal("2.5")], [1, 3], "rounded-items"),
    row(COUNTS, "json", [1, Decimal("2.0")], [1, 2], "integral"),
    row(COUNTS, "cell", "[1, 2.0]", [1, 2], "json-text"),
    row(COUNTS, "json", [1, "2"], Refused("expected an integer"), "string-item"),
]


@pytest.mark.parametrize(("field", "source", "given", "expected"), TABLE)
def test_a_value_from_each_source(field: dict[str, Any], source: str, given: Any, expected: Any) -> None:
    f = F(**field)
    if isinstance(expected, Refused):
        with pytest.raises(fieldvalues.InvalidValueError) as refused:
            SOURCES[source](f, given)
        assert expected.message in str(refused.value)
        return
    got = SOURCES[source](f, given)
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, Decimal):  # the scale is part of the value: 12.30, not 12.3
        assert got.as_tuple() == expected.as_tuple()


def test_none_is_none_from_every_source_that_carries_it() -> None:
    for field in (INTEGER, DECIMAL, STRING, DATE, JSON, TAGS):
        f = F(**field)
        assert fieldvalues.coerce(f, None) is None
        assert fieldvalues.convert(f, None) is None
        assert fieldvalues.to_json(f, None) is None


RENDERED = [
    pytest.param(DECIMAL, Decimal("12.30"), "12.30", id="decimal-keeps-its-scale"),
    pytest.param(MONEY, Decimal("1E+2"), "100", id="money-no-exponent"),
    pytest.param(DATE, dt.date(2024, 5, 1), "2024-05-01", id="date"),
    pytest.param(DATETIME, dt.datetime(2024, 5, 1, tzinfo=UTC), "2024-05-01T00:00:00+00:00", id="datetime"),
    pytest.param(TIME, dt.time(6, 47, 1, 72513), "06:47:01.072513", id="time-microseconds"),
    pytest.param(UUID, uuid.UUID(U), U, id="uuid"),
    pytest.param(INTEGER, 17, 17, id="integer"),
    pytest.param({"type": "string", "masked": True}, "secret", "****", id="masked"),
]


@pytest.mark.parametrize(("field", "value", "shown"), RENDERED)
def test_a_value_as_json_and_as_the_catalog_writes_it(field: dict[str, Any], value: Any, shown: Any) -> None:
    """``present`` (one value) and ``converter`` (chosen once per field, used for pages) agree."""
    f = F(**field)
    assert fieldvalues.present(f, value) == shown
    convert = fieldvalues.converter(f)
    assert (convert(value) if convert is not None else value) == shown


# --- properties: every source reads a value the same, and what is shown reads back -------------

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(_INT64)
def test_an_integer_reads_the_same_from_every_source(n: int) -> None:
    f = F(**INTEGER)
    assert fieldvalues.coerce(f, n) == n
    assert fieldvalues.coerce(f, Decimal(n)) == n
    for text in (str(n), f"{n}.0", f" {n} "):
        assert fieldvalues.from_text(f, text.strip()) == n
        assert fieldvalues.coerce(f, fieldvalues.from_cell(f, text)) == n
    assert fieldvalues.convert(f, n) == n


_ABOVE = st.integers(min_value=2**63, max_value=2**80)
_PAST_64 = _ABOVE | st.integers(min_value=-(2**80), max_value=-(2**63) - 1)


@given(_PAST_64)
def test_an_integer_past_64_bits_is_refused_from_every_source(n: int) -> None:
    f = F(**INTEGER)
    for read in (lambda: fieldvalues.coerce(f, n), lambda: fieldvalues.from_text(f, str(n))):
        with pytest.raises(fieldvalues.InvalidValueError, match="64-bit"):
            read()


@given(
    st.decimals(min_value=Decimal("-999.99"), max_value=Decimal("999.99"), places=2, allow_nan=False),
)
def test_an_exact_number_reads_back_from_what_it_is_shown_as(number: Decimal) -> None:
    """Taken, shown (``"12.30"``), and read again as text, a CSV cell or a computed value: the
    same number with the same scale."""
    f = F(**DECIMAL)
    held = fieldvalues.coerce(f, number)
    shown = fieldvalues.to_json(f, held)
    for again in (
        fieldvalues.coerce(f, shown),
        fieldvalues.from_text(f, shown),
        fieldvalues.coerce(f, fieldvalues.from_cell(f, shown)),
        fieldvalues.convert(f, held),
    ):
        assert again == held
        assert again.as_tuple() == held.as_tuple()


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**6), max_value=10**6))
def test_a_computed_number_is_what_a_client_could_have_sent(number: Decimal) -> None:
    """A formula's result is rounded to the field's scale; the result is a value a body may hold."""
    f = F(type="decimal", scale=2)
    held = fieldvalues.convert(f, number)
    assert fieldvalues.coerce(f, held) == held
    assert abs(held - number) <= Decimal("0.005")


@given(st.dates())
def test_a_date_reads_back_from_what_it_is_shown_as(day: dt.date) -> None:
    f = F(**DATE)
    shown = fieldvalues.to_json(f, day)
    assert fieldvalues.coerce(f, shown) == fieldvalues.from_text(f, shown) == day
    assert fieldvalues.coerce(f, fieldvalues.from_cell(f, shown)) == day


@given(st.datetimes(timezones=st.just(UTC)))
def test_a_datetime_reads_back_from_what_it_is_shown_as(at: dt.datetime) -> None:
    f = F(**DATETIME)
    shown = fieldvalues.present(f, at)
    assert fieldvalues.coerce(f, shown) == fieldvalues.from_text(f, shown) == at


@given(st.text(max_size=50))
def test_text_is_taken_as_it_is_or_refused_for_what_postgres_cannot_store(text: str) -> None:
    f = F(type="text")
    if "\x00" in text:
        with pytest.raises(fieldvalues.InvalidValueError, match="NUL"):
            fieldvalues.coerce(f, text)
        return
    assert fieldvalues.coerce(f, text) == fieldvalues.from_text(f, text) == text
    assert fieldvalues.coerce(f, fieldvalues.from_cell(f, text)) == text
