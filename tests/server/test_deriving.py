"""``deriving``, ``converting`` and ``checking`` without a server: plans, values, rules, guards.

The plans come from real manifests (loaded and validated like the server loads them); ``derive`` is
called with the values ``fieldvalues.coerce_row`` would hand it, so these tests pin the rules one by
one. The HTTP behaviour is in test_derived_rest.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from dap.config.enums import FieldType, NaturalKeyEntry
from dap.config.fields import Field, ValidationRule
from dap.server import fieldvalues
from dap.server.catalog import Catalog, checking, plans
from dap.server.documents import deriving, filling
from dap.server.storage import migrations

from . import test_derived_rest
from .conftest import load

NOW = dt.datetime(2024, 5, 17, 9, 30, tzinfo=dt.UTC)
ITEM_TABLE = "pure__item"

SPEC = {
    "pure/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: pure}\nspec: {title: Pure}\n",
    "pure/item.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: pure}
spec:
  fields:
    - {name: title, type: string}
    - {name: unit_price, type: money, scale: 2}
    - {name: region, type: string}
  expose: [{type: rest}]
""",
    "pure/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: pure}
spec:
  lifecycle: true
  fields:
    - name: number
      type: string
      natural_key: true
      natural_key_rule: {pattern: "PO-{YYYY}-{#####}", reset: yearly}
      read_only: true
    - {name: item, type: relation, relation: {entity: pure/item}}
    - {name: region, type: string, auto_fill: {from: item, field: region}}
    - {name: kind, type: enum, enum_values: [standard, rush], default: standard}
    - {name: reason, type: text, required_when: "kind == 'rush'"}
    - {name: locked, type: boolean, default: false}
    - {name: memo, type: string, readonly_when: "locked"}
    - name: code
      type: string
      rules:
        - {rule: pattern, value: "^[A-Z]{3}$", message: Three capital letters.}
        - {rule: max_length, value: 3}
    - name: limit
      type: integer
      rules: [{rule: min, value: 1}, {rule: max, value: 10, message: Ten at most.}]
    - {name: divisor, type: integer}
    - {name: grand, type: money, scale: 2, computed: {formula: "total + 1"}}
    - {name: per_unit, type: decimal, scale: 2, computed: {formula: "total / divisor"}}
    - name: lines
      type: child
      child:
        storage: table
        sequence_field: idx
        fields:
          - {name: idx, type: integer}
          - {name: item, type: relation, required: true, relation: {entity: pure/item}}
          - name: qty
            type: decimal
            precision: 12
            scale: 3
            required: true
            rules: [{rule: min, value: 0}]
          - name: unit_price
            type: money
            scale: 2
            required: true
            auto_fill: {from: item, field: unit_price}
          - {name: amount, type: money, scale: 2, computed: {formula: "round(qty * unit_price, 2)"}}
    - {name: total, type: money, scale: 2, computed: {formula: "sum(lines.amount)"}}
  actions:
    - name: submit
      conditions: [{script: "total > 0", message: An order needs a positive total.}]
    - name: delete
      conditions: [{field: memo, expression: "memo != 'keep'", message: The memo says keep.}]
    - name: remind
      conditions: [{script: "false", message: custom actions are not the server's}]
  expose: [{type: rest}]
""",
    "pure/plain.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: plain, module: pure}
spec:
  fields:
    - {name: title, type: string}
  expose: [{type: rest}]
""",
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(SPEC)


@pytest.fixture(scope="module")
def plan(catalog: Catalog) -> plans.Plan:
    return catalog.resources["pure/order"].derivation


def field_of(catalog: Catalog, name: str) -> Field:
    return catalog.resources["pure/order"].fields[name]


def children(catalog: Catalog) -> dict[str, tuple[Field, ...]]:
    f = field_of(catalog, "lines")
    assert f.child is not None
    return {"lines": f.child.fields}


def coerce(catalog: Catalog, body: dict[str, Any], *, partial: bool = False) -> dict[str, Any]:
    resource = catalog.resources["pure/order"]
    return fieldvalues.coerce_row(resource.fields, body, partial=partial, children=children(catalog))


def derive(
    catalog: Catalog,
    body: dict[str, Any],
    *,
    stored: dict[str, Any] | None = None,
    related: dict[tuple[str, Any], dict[str, Any]] | None = None,
) -> deriving.Derived:
    plan = catalog.resources["pure/order"].derivation
    return deriving.derive(
        plan,
        incoming=coerce(catalog, body, partial=stored is not None),
        body=body,
        stored=stored,
        related=related or {},
        session={"username": "alice"},
        now=NOW,
    )


ITEM_A, ITEM_B = uuid.uuid4(), uuid.uuid4()
RELATED = {
    (ITEM_TABLE, ITEM_A): {"unit_price": Decimal("2.50"), "region": "north"},
    (ITEM_TABLE, ITEM_B): {"unit_price": Decimal("0.10"), "region": None},
}


def paths(derived: deriving.Derived) -> dict[str, str]:
    return {p.path: p.message for p in derived.problems}


# --- plans -----------------------------------------------------------------------------------------


def test_an_entity_without_anything_to_derive_has_the_empty_plan(catalog: Catalog) -> None:
    assert catalog.resources["pure/plain"].derivation is plans.NOTHING
    assert not plans.NOTHING.active


def test_the_plan_orders_formulas_after_what_they_read(plan: plans.Plan) -> None:
    # grand and per_unit are declared before total but read it
    assert [name for name, _ in plan.record.computed] == ["total", "grand", "per_unit"]
    assert plan.reads_rows == {"lines"}
    assert plan.rows["lines"].sequence == "idx"
    assert [(a.field, a.source, a.table, a.column) for a in plan.rows["lines"].auto_fill] == [
        ("unit_price", "item", ITEM_TABLE, "unit_price")
    ]
    assert set(plan.conditions) == {"submit", "delete"}  # custom actions are guarded elsewhere
    assert [(k.field, k.entry, k.pattern, k.reset) for k in plan.natural_keys] == [
        ("number", NaturalKeyEntry.ENGINE, "PO-{YYYY}-{#####}", "yearly")
    ]


def test_a_cycle_of_formulas_is_evaluated_as_declared() -> None:
    a = checking.compile_expression("b + 1")
    b = checking.compile_expression("a + 1")
    assert [n for n, _ in plans._ordered([("a", a), ("b", b)])] == ["a", "b"]


# --- computed --------------------------------------------------------------------------------------


def test_computed_fields_have_columns_added_by_a_safe_step(catalog: Catalog) -> None:
    """Tables migrated before computed fields were stored gain their columns at the next boot."""
    desired = catalog.tables
    computed = {"grand", "per_unit", "total", "amount"}
    before = {
        t.name: dataclasses.replace(t, columns=tuple(c for c in t.columns if c.field not in computed))
        for t in desired
    }
    plan = migrations.plan(before, desired, catalog.entities)
    assert plan.blockers == ()
    assert sorted((s.kind, s.description.split()[2], s.destructive) for s in plan.steps) == [
        ("add_column", "pure__order.grand", False),
        ("add_column", "pure__order.per_unit", False),
        ("add_column", "pure__order.total", False),
        ("add_column", "pure__order__lines.amount", False),
    ]


def test_rows_then_record_formulas_exact_and_quantised(catalog: Catalog) -> None:
    body = {
        "item": str(ITEM_A),
        "divisor": 3,
        "lines": [
            {"item": str(ITEM_A), "qty": "3"},
            {"item": str(ITEM_B), "qty": "0.333", "unit_price": "1.05"},
        ],
    }
    derived = derive(catalog, body, related=RELATED)
    assert derived.problems == []
    lines = derived.values["lines"]
    assert [(r["idx"], r["unit_price"], r["amount"]) for r in lines] == [
        (1, Decimal("2.50"), Decimal("7.50")),
        (2, Decimal("1.05"), Decimal("0.35")),  # carried price kept; 0.34965 rounds half up
    ]
    assert derived.values["total"] == Decimal("7.85")
    assert derived.values["grand"] == Decimal("8.85")
    assert derived.values["per_unit"] == Decimal("2.62")  # 7.85 / 3 = 2.6166… quantised to the scale
    assert derived.values["region"] == "north"  # record-level auto_fill
    assert [k.field for k in derived.generate] == ["number"]


def test_division_by_zero_names_the_field(catalog: Catalog) -> None:
    derived = derive(catalog, {"divisor": 0, "lines": []})
    problems = {p.path: p for p in derived.problems}
    assert set(problems) == {"per_unit"}
    assert problems["per_unit"].code == deriving.FORMULA_FAILED
    assert "division by zero" in problems["per_unit"].message.lower()


@pytest.mark.parametrize(
    ("ftype", "extra", "value", "expected"),
    [
        pytest.param(FieldType.MONEY, {}, Decimal("1.005"), Decimal("1.01"), id="money-half-up"),
        pytest.param(FieldType.DECIMAL, {"scale": 1}, 2, Decimal("2.0"), id="int-to-decimal"),
        pytest.param(FieldType.INTEGER, {}, Decimal("2.5"), 3, id="integer-half-up"),
        pytest.param(FieldType.NUMBER, {}, Decimal("0.5"), 0.5, id="number"),
        pytest.param(FieldType.STRING, {}, Decimal("1.50"), "1.50", id="text-of-decimal"),
        pytest.param(FieldType.STRING, {}, True, "true", id="text-of-boolean"),
        pytest.param(
            FieldType.DATE, {}, dt.datetime(2024, 1, 2, 3, tzinfo=dt.UTC), dt.date(2024, 1, 2), id="date"
        ),
        pytest.param(
            FieldType.DATETIME, {}, dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, tzinfo=dt.UTC), id="datetime"
        ),
        pytest.param(FieldType.BOOLEAN, {}, False, False, id="boolean"),
        pytest.param(FieldType.UUID, {}, str(ITEM_A), ITEM_A, id="uuid"),
    ],
)
def test_convert_to_the_field_type(
    ftype: FieldType, extra: dict[str, Any], value: Any, expected: Any
) -> None:
    f = Field(name="x", type=ftype, **extra)
    assert fieldvalues.convert(f, value) == expected
    assert type(fieldvalues.convert(f, value)) is type(expected)


@pytest.mark.parametrize(
    ("ftype", "extra", "value"),
    [
        pytest.param(FieldType.MONEY, {"precision": 4}, Decimal("1000"), id="precision"),
        pytest.param(FieldType.BOOLEAN, {}, 1, id="number-as-boolean"),
        pytest.param(FieldType.INTEGER, {}, True, id="boolean-as-integer"),
        pytest.param(FieldType.ENUM, {"enum_values": ["a"]}, "b", id="enum"),
        pytest.param(FieldType.DATE, {}, 5, id="number-as-date"),
    ],
)
def test_convert_refuses_what_does_not_fit(ftype: FieldType, extra: dict[str, Any], value: Any) -> None:
    with pytest.raises(fieldvalues.InvalidValueError):
        fieldvalues.convert(Field(name="x", type=ftype, **extra), value)


def test_a_result_that_does_not_fit_is_a_problem_of_the_field() -> None:
    catalog = load(
        {
            **{k: v for k, v in SPEC.items() if k == "pure/module.yaml"},
            "pure/x.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: x, module: pure}
spec:
  fields:
    - {name: a, type: decimal, scale: 2}
    - {name: small, type: decimal, precision: 3, scale: 2, computed: {formula: "a * 100"}}
  expose: [{type: rest}]
""",
        }
    )
    plan = catalog.resources["pure/x"].derivation
    derived = deriving.derive(
        plan, incoming={"a": Decimal("5")}, body={"a": "5"}, stored=None, related={}, session={}, now=NOW
    )
    assert [(p.path, p.code) for p in derived.problems] == [("small", deriving.FORMULA_FAILED)]


def test_update_recomputes_over_the_merged_record(catalog: Catalog) -> None:
    stored_rows = [
        {
            "idx": 1,
            "item": ITEM_A,
            "qty": Decimal("1"),
            "unit_price": Decimal("2.00"),
            "amount": Decimal("2.00"),
        }
    ]
    stored = {
        "divisor": 4,
        "total": Decimal("2.00"),
        "lines": stored_rows,
        "kind": "standard",
        "locked": False,
    }
    # the payload leaves the rows alone: the stored rows are aggregated as they are
    derived = derive(catalog, {"divisor": 2}, stored=stored)
    assert derived.problems == []
    assert derived.values["per_unit"] == Decimal("1.00")
    assert "lines" not in derived.values
    assert derived.generate == ()
    # the payload replaces the rows: they are derived again and the total follows
    body = {"lines": [{"item": str(ITEM_B), "qty": "10"}]}
    derived = derive(catalog, body, stored=stored, related=RELATED)
    assert derived.values["total"] == Decimal("1.00")
    assert derived.values["per_unit"] == Decimal("0.25")  # stored divisor 4


# --- auto_fill -------------------------------------------------------------------------------------


def test_auto_fill_on_update_only_when_the_source_changes(catalog: Catalog) -> None:
    stored = {"item": ITEM_A, "region": "north", "lines": [], "kind": "standard"}
    assert "region" not in derive(catalog, {"divisor": 1}, stored=stored, related=RELATED).values
    same = derive(catalog, {"item": str(ITEM_A)}, stored=stored, related=RELATED)
    assert "region" not in same.values  # the relation did not change
    changed = derive(catalog, {"item": str(ITEM_B)}, stored=stored, related=RELATED)
    assert changed.values["region"] is None  # copied, even when the related value is empty
    kept = derive(catalog, {"item": str(ITEM_B), "region": "mine"}, stored=stored, related=RELATED)
    assert kept.values["region"] == "mine"  # a payload carrying the value keeps it


def test_a_required_auto_filled_field_is_checked_after_the_fill(catalog: Catalog) -> None:
    # coerce_row lets a missing required auto_fill field pass; derive reports it when nothing filled it
    derived = derive(catalog, {"lines": [{"item": str(uuid.uuid4()), "qty": "1"}]}, related=RELATED)
    assert paths(derived) == {"lines[0].unit_price": "is required (and item gave no value to copy)"}


# --- sequences -------------------------------------------------------------------------------------


def test_sequence_given_in_every_row_orders_the_rows(catalog: Catalog) -> None:
    rows = [
        {"idx": 30, "item": str(ITEM_A), "qty": "1", "unit_price": "1"},
        {"idx": 10, "item": str(ITEM_A), "qty": "2", "unit_price": "1"},
    ]
    derived = derive(catalog, {"lines": rows})
    assert [(r["idx"], r["qty"]) for r in derived.values["lines"]] == [
        (10, Decimal("2.000")),
        (30, Decimal("1.000")),
    ]


@pytest.mark.parametrize(
    ("idx", "message"),
    [
        pytest.param([1, None], "give idx in every row or in none", id="mixed"),
        pytest.param([2, 2], "idx must be unique among the rows", id="duplicate"),
    ],
)
def test_sequence_mixed_or_duplicate_is_refused(
    catalog: Catalog, idx: list[int | None], message: str
) -> None:
    rows = [{"item": str(ITEM_A), "qty": "1", "unit_price": "1", **({"idx": i} if i else {})} for i in idx]
    assert message in paths(derive(catalog, {"lines": rows}))["lines"]


# --- required_when, readonly_when, rules -----------------------------------------------------------


def test_required_when(catalog: Catalog) -> None:
    assert paths(derive(catalog, {"kind": "rush"})) == {
        "reason": "is required (required_when kind == 'rush')"
    }
    assert paths(derive(catalog, {"kind": "rush", "reason": "late"})) == {}
    assert paths(derive(catalog, {"kind": "standard"})) == {}
    # on update over the merged record: the stored kind counts
    assert "reason" in paths(derive(catalog, {"reason": ""}, stored={"kind": "rush", "lines": []}))


def test_readonly_when_uses_the_stored_record_on_update(catalog: Catalog) -> None:
    locked = {"locked": True, "memo": "a", "lines": []}
    assert "memo" in paths(derive(catalog, {"memo": "b"}, stored=locked))
    assert paths(derive(catalog, {"memo": "a"}, stored=locked)) == {}  # sending the current value is fine
    # unlocking in the same payload does not open the field: the form showed it locked
    assert "memo" in paths(derive(catalog, {"locked": False, "memo": "b"}, stored=locked))
    assert paths(derive(catalog, {"memo": "b"}, stored={"locked": False, "lines": []})) == {}
    # on create the new record decides
    assert "memo" in paths(derive(catalog, {"locked": True, "memo": "b"}))
    assert paths(derive(catalog, {"locked": False, "memo": "b"})) == {}


@pytest.mark.parametrize(
    ("body", "problems"),
    [
        pytest.param({"code": "ABC"}, [], id="pattern-ok"),
        pytest.param({"code": "abc"}, [("code", "Three capital letters.")], id="pattern"),
        pytest.param({"code": "ABCD"}, [("code", "Three capital letters."),
                                        ("code", "must have at most 3 character(s)")], id="every-rule"),
        pytest.param({"limit": 0}, [("limit", "must be at least 1")], id="min"),
        pytest.param({"limit": 11}, [("limit", "Ten at most.")], id="max"),
        pytest.param({"limit": 10}, [], id="max-inclusive"),
        pytest.param({"lines": [{"item": str(ITEM_A), "qty": "-1", "unit_price": "1"}]},
                     [("lines[0].qty", "must be at least 0")], id="row-rule"),
    ],
)  # fmt: skip
def test_rules(catalog: Catalog, body: dict[str, Any], problems: list[tuple[str, str]]) -> None:
    derived = derive(catalog, body)
    assert [(p.path, p.message) for p in derived.problems] == problems
    assert all(p.code == deriving.RULE_FAILED for p in derived.problems)


def test_rules_on_update_check_only_changed_fields(catalog: Catalog) -> None:
    stored = {"limit": 50, "code": "abc", "lines": []}  # stored before the rules existed
    assert paths(derive(catalog, {"divisor": 1}, stored=stored)) == {}
    assert "limit" in paths(derive(catalog, {"limit": 60}, stored=stored))


def test_expression_and_length_rules() -> None:
    rule = checking.rule_of("a", ValidationRule(rule="expression", value="a < b", message="a before b"))
    assert checking.problem(rule, 1, {"a": 1, "b": 2}, NOW) is None
    assert checking.problem(rule, 3, {"a": 3, "b": 2}, NOW) == "a before b"
    rule = checking.rule_of("a", ValidationRule(rule="min_length", value=2))
    assert checking.problem(rule, ["x"], {}, NOW) == "must have at least 2 item(s)"
    rule = checking.rule_of("a", ValidationRule(rule="min", value="2024-01-01"))
    assert checking.problem(rule, dt.date(2023, 12, 31), {}, NOW) == "must be at least 2024-01-01"
    broken = checking.rule_of("a", ValidationRule(rule="pattern", value="("))
    assert "invalid" in (checking.problem(broken, "x", {}, NOW) or "")


# --- natural keys and conditions -------------------------------------------------------------------


def test_natural_keys_never_change_on_update(catalog: Catalog) -> None:
    plan = catalog.resources["pure/order"].derivation
    problems = deriving._natural_keys(plan, {"number": "X"}, frozenset({"number"}), creating=False)
    assert [(p.path, p.message) for p in problems] == [
        ("number", "is a natural key and cannot be changed after create")
    ]


def test_conditions(plan: plans.Plan) -> None:
    ok = deriving.check_conditions(plan, "submit", deriving.context({"total": Decimal("1")}, {}), NOW)
    assert ok == []
    failed = deriving.check_conditions(plan, "submit", deriving.context({"total": Decimal("0")}, {}), NOW)
    assert [(p.path, p.message, p.code) for p in failed] == [
        ("submit", "An order needs a positive total.", deriving.CONDITION_FAILED)
    ]
    older = deriving.check_conditions(plan, "delete", deriving.context({"memo": "keep"}, {}), NOW)
    assert [(p.path, p.message) for p in older] == [("memo", "The memo says keep.")]
    assert deriving.check_conditions(plan, "update", {}, NOW) == []


def test_session_and_parent_are_visible_to_row_expressions() -> None:
    catalog = load(
        {
            "pure/module.yaml": SPEC["pure/module.yaml"],
            "pure/x.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: x, module: pure}
spec:
  fields:
    - {name: factor, type: integer}
    - {name: who, type: string, computed: {formula: "session.username"}}
    - name: rows
      type: child
      child:
        storage: jsonb
        fields:
          - {name: n, type: integer}
          - {name: scaled, type: integer, computed: {formula: "n * parent.factor"}}
          - {name: bare, type: integer, computed: {formula: "n * factor"}}
  expose: [{type: rest}]
""",
        }
    )
    plan = catalog.resources["pure/x"].derivation
    body = {"factor": 3, "rows": [{"n": 2}]}
    derived = deriving.derive(
        plan,
        incoming={"factor": 3, "rows": [{"n": 2}]},
        body=body,
        stored=None,
        related={},
        session={"username": "bob"},
        now=NOW,
    )
    assert derived.problems == []
    assert derived.values["who"] == "bob"
    assert derived.values["rows"] == [{"n": 2, "scaled": 6, "bare": 6}]


def test_related_records_are_loaded_per_table_not_per_row() -> None:
    # the HTTP tests' spec: they are asyncio tests, this one is not (pytest-asyncio warns of a mix)
    plan = load(test_derived_rest.SPEC).resources["buy/order"].derivation
    a, b = uuid.uuid4(), uuid.uuid4()
    rows = [{"item": a, "qty": 1}, {"item": b, "qty": 1}, {"item": a, "qty": 1, "unit_price": 1}]
    body = {"item": str(a), "lines": [{"item": "x", "qty": 1}, {"item": "y", "qty": 1}, {"unit_price": 1}]}
    wanted = filling.wanted_related(plan, {"item": a, "lines": rows}, body, creating=True)
    assert wanted == {"buy__item": ({"region", "unit_price"}, {a, b})}  # one query for the whole write
