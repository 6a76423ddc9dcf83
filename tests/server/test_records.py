"""Field coercion per FieldType, list-query parsing and SQL building (pure)."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from dap.config.enums import FilterOp
from dap.config.fields import Field
from dap.server import errors, fieldvalues
from dap.server.catalog import Catalog
from dap.server.storage import queries, sql
from dap.server.workflows import filters

from .conftest import load


def F(**kw: Any) -> Field:
    return Field.model_validate({"name": "f", **kw})


U = "6f1c3a9e-7b7d-4d7a-9a55-1b2c3d4e5f60"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        pytest.param(F(type="string"), "hi", "hi", id="string"),
        pytest.param(F(type="text"), "long", "long", id="text"),
        pytest.param(F(type="integer"), 42, 42, id="integer"),
        pytest.param(F(type="decimal", scale=3), Decimal("1.5"), Decimal("1.500"), id="decimal-scale"),
        pytest.param(F(type="money"), "10.10", Decimal("10.10"), id="money-string"),
        pytest.param(F(type="money"), 3, Decimal("3.00"), id="money-int"),
        pytest.param(F(type="percent", scale=2), "12.5", Decimal("12.50"), id="percent"),
        pytest.param(F(type="number"), Decimal("0.1"), 0.1, id="number"),
        pytest.param(F(type="boolean"), False, False, id="boolean"),
        pytest.param(F(type="enum", enum_values=["a", "b"]), "b", "b", id="enum"),
        pytest.param(F(type="string", options=[{"value": "s"}]), "s", "s", id="options"),
        pytest.param(F(type="date"), "2024-02-29", dt.date(2024, 2, 29), id="date"),
        pytest.param(
            F(type="datetime"),
            "2024-05-01T10:00:00Z",
            dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC),
            id="datetime",
        ),
        pytest.param(
            F(type="datetime"),
            "2024-05-01T10:00:00",
            dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC),
            id="naive-is-utc",
        ),
        pytest.param(F(type="time"), "08:30", dt.time(8, 30), id="time"),
        pytest.param(F(type="uuid"), U, uuid.UUID(U), id="uuid"),
        pytest.param(F(type="relation", relation={"entity": "m/x"}), U, uuid.UUID(U), id="relation"),
        pytest.param(F(type="json"), {"a": [1]}, {"a": [1]}, id="json"),
        pytest.param(
            F(type="json"), {"a": Decimal("1.5"), "b": Decimal("2")}, {"a": 1.5, "b": 2}, id="json-numbers"
        ),
        pytest.param(F(type="string", multiple=True), ["a", "b"], ["a", "b"], id="multiple"),
        pytest.param(F(type="money", multiple=True), ["1.5"], ["1.50"], id="multiple-money"),
    ],
)
def test_coerce_accepts(field: Field, value: Any, expected: Any) -> None:
    result = fieldvalues.coerce(field, value)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        pytest.param(F(type="string"), 5, "string", id="string-int"),
        pytest.param(F(type="string"), "a\x00b", "NUL", id="nul"),
        pytest.param(F(type="string"), "a\ud800", "Unicode", id="lone-surrogate"),
        pytest.param(F(type="money"), "1e400", "too large", id="huge-money"),
        pytest.param(F(type="decimal", scale=2), "1.5e-400", "too large|decimal places", id="tiny-scale"),
        pytest.param(F(type="integer"), "5", "integer", id="integer-string"),
        pytest.param(F(type="integer"), True, "integer", id="integer-bool"),
        pytest.param(F(type="integer"), 2**64, "range", id="integer-range"),
        pytest.param(F(type="money"), 1.5, "decimal", id="money-float"),
        pytest.param(F(type="money"), "1.005", "2 decimal places", id="money-scale"),
        pytest.param(F(type="decimal", precision=4, scale=2), "123.45", "significant", id="precision"),
        pytest.param(F(type="decimal"), "NaN", "finite", id="nan"),
        pytest.param(F(type="decimal"), "abc", "decimal", id="decimal-text"),
        pytest.param(F(type="boolean"), "true", "true or false", id="boolean-string"),
        pytest.param(F(type="enum", enum_values=["a"]), "z", "one of", id="enum-value"),
        pytest.param(F(type="string", options=[{"value": "s"}]), "x", "one of", id="option-value"),
        pytest.param(F(type="date"), "01/02/2024", "ISO 8601", id="date-format"),
        pytest.param(F(type="datetime"), "yesterday", "ISO 8601", id="datetime-format"),
        pytest.param(F(type="time"), "25:00", "time", id="time-format"),
        pytest.param(F(type="uuid"), "nope", "uuid", id="uuid"),
        pytest.param(F(type="number"), Decimal("1e400"), "finite", id="number-infinite"),
        pytest.param(F(type="json"), {"a": "\x00"}, "NUL", id="json-nul"),
        pytest.param(F(type="string", multiple=True), "a", "list", id="multiple-scalar"),
    ],
)
def test_coerce_refuses(field: Field, value: Any, fragment: str) -> None:
    with pytest.raises(fieldvalues.InvalidValueError, match=fragment):
        fieldvalues.coerce(field, value)


def test_output_is_exact_and_masked() -> None:
    assert fieldvalues.present(F(type="money"), Decimal("10.10")) == "10.10"
    assert fieldvalues.present(F(type="date"), dt.date(2024, 1, 2)) == "2024-01-02"
    assert fieldvalues.present(F(type="string", masked=True), "secret") == fieldvalues.MASK
    assert fieldvalues.present(F(type="string", masked=True), None) is None


def test_row_collects_every_problem() -> None:
    fields = (
        F(type="integer").model_copy(update={"name": "n"}),
        Field(name="r", type="string", required=True),  # type: ignore[arg-type]
        Field(name="ro", type="string", read_only=True),  # type: ignore[arg-type]
        Field(name="im", type="string", immutable=True),
    )  # type: ignore[arg-type]
    with pytest.raises(fieldvalues.InvalidRowError) as caught:
        fieldvalues.coerce_row(
            fields, {"n": "x", "ro": "y", "zz": 1, "id": "1"}, partial=False, reserved=frozenset({"id"})
        )
    paths = {p for p, _ in caught.value.problems}
    assert paths == {"n", "ro", "zz", "id", "r"}
    with pytest.raises(fieldvalues.InvalidRowError, match="immutable"):
        fieldvalues.coerce_row(fields, {"im": "x"}, partial=True)


@pytest.fixture(scope="module")
def shop() -> Catalog:
    return load()


def _parse(catalog: Catalog, query: str) -> queries.ListQuery:
    pairs = [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in query.split("&") if p]
    return filters.parse(catalog.resources["shop/product"], pairs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "op", "values"),
    [
        pytest.param("qty=3", FilterOp.EQ, (3,), id="plain-eq"),
        pytest.param("qty[eq]=3", FilterOp.EQ, (3,), id="eq"),
        pytest.param("qty[neq]=3", FilterOp.NEQ, (3,), id="neq"),
        pytest.param("price[gt]=1.5", FilterOp.GT, (Decimal("1.50"),), id="gt"),
        pytest.param("price[gte]=1", FilterOp.GTE, (Decimal("1.00"),), id="gte"),
        pytest.param("launched[lt]=2024-01-01", FilterOp.LT, (dt.date(2024, 1, 1),), id="lt"),
        pytest.param("qty[lte]=9", FilterOp.LTE, (9,), id="lte"),
        pytest.param("qty[between]=1,5", FilterOp.BETWEEN, (1, 5), id="between"),
        pytest.param("color[in]=red,blue", FilterOp.IN, ("red", "blue"), id="in"),
        pytest.param("color[nin]=red", FilterOp.NIN, ("red",), id="nin"),
        pytest.param("title[like]=Bo%", FilterOp.LIKE, ("Bo%",), id="like"),
        pytest.param("title[ilike]=%bo%", FilterOp.ILIKE, ("%bo%",), id="ilike"),
        pytest.param("weight[null]", FilterOp.NULL, (), id="null"),
        pytest.param("weight[notnull]=true", FilterOp.NOTNULL, (), id="notnull"),
        pytest.param(
            "created_at[gte]=2024-01-01T00:00:00Z",
            FilterOp.GTE,
            (dt.datetime(2024, 1, 1, tzinfo=dt.UTC),),
            id="system-created-at",
        ),
        pytest.param(f"id={U}", FilterOp.EQ, (uuid.UUID(U),), id="system-id"),
        pytest.param("owner=alice", FilterOp.EQ, ("alice",), id="system-owner"),
        pytest.param("attrs[null]", FilterOp.NULL, (), id="json-null"),
    ],
)
def test_filter_operators(shop: Catalog, query: str, op: FilterOp, values: tuple[Any, ...]) -> None:
    (cond,) = _parse(shop, query).conditions
    assert (cond.op, cond.values) == (op, values)


@pytest.mark.parametrize(
    ("query", "param"),
    [
        pytest.param("nosuch=1", "nosuch", id="unknown-field"),
        pytest.param("cost=1", "cost", id="excluded-field"),
        pytest.param("qty=abc", "qty", id="wrong-type"),
        pytest.param("qty[near]=1", "qty[near]", id="unknown-op"),
        pytest.param("qty[between]=1", "qty[between]", id="between-one"),
        pytest.param("qty[like]=1", "qty[like]", id="like-on-integer"),
        pytest.param("active[gt]=true", "active[gt]", id="gt-on-boolean"),
        pytest.param("attrs=1", "attrs", id="json-eq"),
        pytest.param("supplier_email=x", "supplier_email", id="masked"),
        pytest.param("docstatus=draft", "docstatus", id="docstatus-without-lifecycle"),
        pytest.param("weight[null]=5", "weight[null]", id="null-with-value"),
        pytest.param("limit=1001", "limit", id="limit-max"),
        pytest.param("limit=0", "limit", id="limit-zero"),
        pytest.param("offset=-1", "offset", id="offset-negative"),
        pytest.param("sort=attrs", "sort", id="sort-json"),
        pytest.param("sort=nosuch", "sort", id="sort-unknown"),
        pytest.param("fields=nosuch", "fields", id="fields-unknown"),
        pytest.param("count=maybe", "count", id="count-value"),
        pytest.param("Bad-Name=1", "Bad-Name", id="bad-param"),
        pytest.param("title[like]=a\x00", "title[like]", id="like-nul"),
        pytest.param("price[gt]=1e400", "price[gt]", id="huge-decimal"),
        pytest.param("qty=99999999999999999999", "qty", id="integer-overflow"),
    ],
)
def test_filter_refusals(shop: Catalog, query: str, param: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        _parse(shop, query)
    assert caught.value.errors[0].path == param
    assert caught.value.code == "SVC.QUERY.INVALID"


def test_sql_always_carries_the_tenant(shop: Catalog) -> None:
    resource = shop.resources["shop/product"]
    tenant = uuid.uuid4()
    query = _parse(shop, "qty[in]=1,2&title[ilike]=%a%&sort=-price,title&limit=10&offset=20")
    text, args = sql.select_list(resource.table, query, tenant, None)
    assert text.count("tenant_id = $1") == 1 and args[0] == tenant
    assert 'ORDER BY "price" DESC, "title" ASC, "id" ASC LIMIT $4 OFFSET $5' in text
    assert args[1:] == [[1, 2], "%a%", 10, 20]
    for text, args in (
        sql.select_one(resource.table, tenant, uuid.uuid4()),
        sql.update(resource.table, tenant, uuid.uuid4(), {"qty": 1}, expected_version=3),
        sql.delete(resource.table, tenant, uuid.uuid4()),
        sql.insert(resource.table, tenant, {"qty": 1}, owner="a"),
        sql.count(resource.table, query, tenant),
    ):
        assert "$1" in text and args[0] == tenant


def test_write_statements_are_kept_per_table_and_column_set(shop: Catalog) -> None:
    """``sql.insert``/``sql.update`` keep their text per table and column set: the kept text is
    the one built afresh (numbering, RETURNING, the version and draft conditions), the arguments
    are the call's own, and another catalog's table of the same name gets its own text."""
    resource = shop.resources["shop/product"]
    tenant, record_id = uuid.uuid4(), uuid.uuid4()
    sql._TEXTS.clear()
    first = sql.insert(resource.table, tenant, {"title": "a", "qty": 1}, owner="o")
    assert first[0].startswith(
        'INSERT INTO "shop__product" ("tenant_id", "created_by", "owner", "title", "qty")'
    )
    assert "VALUES ($1, $2, $3, $4, $5) RETURNING " in first[0]
    assert first[1] == [tenant, "o", "o", "a", 1]
    again = sql.insert(resource.table, tenant, {"title": "b", "qty": 2}, owner="p")
    assert again[0] is first[0] and again[1] == [tenant, "p", "p", "b", 2]
    assert sql.insert(resource.table, tenant, {"qty": 2, "title": "b"}, owner="p")[0] != first[0]
    text, args = sql.update(
        resource.table, tenant, record_id, {"qty": 3}, expected_version=4, draft_only=True
    )
    where = "WHERE tenant_id = $1 AND id = $3 AND version = $4 AND docstatus = 0"
    assert text.endswith(f"{where} RETURNING {resource.table.select_columns}")
    assert '"qty" = $2' in text and args == [tenant, 3, record_id, 4]
    plain = sql.update(resource.table, tenant, record_id, {"qty": 3}, expected_version=None)
    assert plain[0].split(" WHERE ")[1].startswith("tenant_id = $1 AND id = $3 RETURNING") and plain[1] == [
        tenant,
        3,
        record_id,
    ]
    other = load().resources["shop/product"].table  # a new catalog: its own table object
    assert sql.insert(other, tenant, {"title": "a", "qty": 1}, owner="o")[0] == first[0]
    assert sql._TEXTS[(id(other), ("title", "qty"))][0] is other


def test_iso_text_writes_what_isoformat_writes() -> None:
    """The fast writers of answers must not change a byte of them: dates, times and timestamps
    with and without microseconds, naive and at several offsets."""
    import random

    rng = random.Random(11)
    zones = [
        None,
        dt.UTC,
        dt.timezone(dt.timedelta(hours=2)),
        dt.timezone(dt.timedelta(hours=-9, minutes=-30)),
    ]
    for _ in range(2000):
        stamp = dt.datetime(
            rng.randint(1, 9999),
            rng.randint(1, 12),
            rng.randint(1, 28),
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
            rng.choice([0, rng.randint(0, 999_999)]),
            tzinfo=rng.choice(zones),
        )
        for value in (stamp, stamp.date()):
            assert fieldvalues.iso_text(value) == value.isoformat()
        assert fieldvalues.rendering._iso(stamp.time()) == stamp.time().isoformat()


def _outcome(convert: Any, value: Any) -> tuple[str, str]:
    try:
        result = convert(value)
    except fieldvalues.InvalidValueError as exc:
        return "refused", str(exc)
    return type(result).__name__, repr(result)


def _reference(f: Field, value: Any) -> Any:
    """The rules of a body's value as first written, one check after the other: the text of a
    textual field, and an exact number refused past its scale, quantized to it, then held to its
    precision. The coercers (chosen once per field, quantizing once) must answer what these do."""
    if f.type in fieldvalues.limits.TEXTUAL:
        if not isinstance(value, str):
            raise fieldvalues.InvalidValueError("expected a string")
        fieldvalues.check_text(value)
        limit = fieldvalues.text_limit(f)
        if limit is not None and len(value) > limit:
            why = " (the field is indexed)" if f.index or f.unique else ""
            raise fieldvalues.InvalidValueError(f"at most {limit} characters{why}, got {len(value)}")
        choices = fieldvalues.allowed_values(f)
        if choices and value not in choices:
            raise fieldvalues.InvalidValueError(f"must be one of {', '.join(map(str, choices))}")
        return value
    if f.type in fieldvalues.limits.EXACT:
        from decimal import InvalidOperation

        number = fieldvalues.parsing.decimal_of(value)
        scale = fieldvalues.scale_of(f)
        exponent = number.as_tuple().exponent
        assert isinstance(exponent, int)
        if scale is not None:
            quantum = Decimal(1).scaleb(-scale)
            try:
                if -exponent > scale and number != number.quantize(quantum):
                    raise fieldvalues.InvalidValueError(f"at most {scale} decimal places")
                number = number.quantize(quantum)
            except InvalidOperation as exc:
                raise fieldvalues.InvalidValueError("too large") from exc
        precision = fieldvalues.precision_of(f)
        if precision is not None and len(number.as_tuple().digits) > precision:
            raise fieldvalues.InvalidValueError(f"at most {precision} significant digits")
        return number
    return fieldvalues.parsing.one_value(f, value)


def test_a_fields_coercer_answers_what_the_plain_rules_answer() -> None:
    """``fieldvalues.coercer`` (chosen once per field) must take and refuse exactly what the plain
    rules answer, with the same value (a Decimal's exponent included) and the same message."""
    import random

    fields = [
        F(type="string"),
        F(type="string", index=True),
        F(type="string", unique=True),
        F(type="string", rules=[{"rule": "max_length", "value": 3}]),
        F(type="string", options=[{"value": "s"}, {"value": "m"}]),
        F(type="text"),
        F(type="enum", enum_values=["red", "green"]),
        F(type="integer"),
        F(type="decimal"),
        F(type="decimal", scale=3),
        F(type="decimal", scale=2, precision=5),
        F(type="decimal", scale=0, precision=3),
        F(type="money"),
        F(type="money", scale=2),
        F(type="money", scale=4, precision=6),
        F(type="percent", scale=2),
        F(type="date"),
        F(type="uuid"),
        F(type="boolean"),
    ]
    values: list[Any] = [
        "",
        "hi",
        "red",
        "s",
        "x" * 501,
        "x" * 10_001,
        "a\x00b",
        "\ud800",
        0,
        1,
        -1,
        2**63,
        -(2**63),
        2**63 - 1,
        True,
        False,
        1.5,
        "1",
        "12.5",
        "12.50",
        "12.505",
        "-0.00",
        "0",
        "0.000",
        "1e5",
        "1E-7",
        "NaN",
        "sNaN",
        "Infinity",
        "-inf",
        "abc",
        " 1 ",
        "1_000",
        "99999",
        "999.99",
        "1000.00",
        "123456.7",
        "9" * 40,
        "1e400",
        Decimal("12.50"),
        Decimal("1.005"),
        Decimal("-0"),
        Decimal("1E+2"),
        Decimal("7.0"),
        Decimal("NaN"),
        Decimal("123.4567"),
        Decimal("0.0001"),
        None,
        [],
        {},
        U,
    ]
    rng = random.Random(27)
    for _ in range(400):  # random exact numbers at random scales and sizes
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))
        point = rng.randint(0, len(digits))
        text = f"{'-' if rng.random() < 0.3 else ''}{digits[:point] or '0'}.{digits[point:] or '0'}"
        values += [text, Decimal(text)]
    for f in fields:
        for value in values:
            assert _outcome(fieldvalues.coercer(f), value) == _outcome(
                lambda v, f=f: _reference(f, v), value
            ), (
                f.type,
                f.scale,
                f.precision,
                value,
            )
