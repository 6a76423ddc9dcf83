"""Seed files read into rows (``workflows.seeds``): shapes, lines, keys, relative dates. Pure."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dap.server.workflows import csvdialect, seeds

ITEMS = """\
# a comment
entity: stock/item
records:
  - code: BOLT-M8
    unit_price: 0.12
    title: Bolt
  - {code: NUT-M8, unit_price: 0.04, title: Nut, launched: 2024-05-01}
---
entity: buying/purchase_order
records:
  - _key: first
    order_date: today-3
    lines:
      - {item: BOLT-M8, qty: 2.5}
    _submit: true
    _actions: [request_approval, approve]
    _votes:
      - {as: ada, roles: [purchase_committee]}
"""


def test_rows_know_their_file_line_and_field_lines() -> None:
    rows = seeds.parse_yaml("seed/10-items.yaml", ITEMS)
    assert [(r.entity, r.line) for r in rows] == [
        ("stock/item", 4),
        ("stock/item", 7),
        ("buying/purchase_order", 11),
    ]
    bolt, nut, order = rows
    assert bolt.lines == {"code": 4, "unit_price": 5, "title": 6}
    assert bolt.values["unit_price"] == Decimal("0.12")  # exact, never a float
    assert nut.values["launched"] == "2024-05-01"  # dates stay ISO text, as the API reads them
    assert order.key == "first" and order.submit and order.actions == ("request_approval", "approve")
    assert order.votes == (seeds.Vote("ada", ("purchase_committee",), True),)
    assert "_key" not in order.values
    assert order.line_of("lines[0].qty") == 14  # the child row's own line
    assert order.line_of("lines[5].qty") == 13  # no such row: the field's line
    assert str(order.problem("lines[0].qty", "bad")) == "seed/10-items.yaml:14: lines[0].qty: bad"


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        pytest.param("entity: stock\nrecords: []\n", 1, "entity", id="entity-without-module"),
        pytest.param("entity: a/b\nrecords: {x: 1}\n", 2, "records", id="records-not-a-list"),
        pytest.param("entity: a/b\nrecords:\n  - x: 1\n    _submit: yes please\n", 4, "_submit", id="submit"),
        pytest.param(
            "entity: a/b\nrecords:\n  - x: 1\n    _secret: 1\n", 4, "_secret", id="unknown-loader-key"
        ),
        pytest.param("entity: a/b\nrecords:\n  - x: 1\n    _votes: [{who: ada}]\n", 4, "_votes", id="votes"),
        pytest.param("entity: a/b\nrecords:\n  - [1, 2]\n", 2, None, id="record-not-a-mapping"),
        pytest.param("entity: a/b\nrecords:\n  - x: [1\n", 4, None, id="broken-yaml"),
    ],
)
def test_a_malformed_file_names_line_and_field(text: str, line: int, field: str | None) -> None:
    with pytest.raises(seeds.SeedFileError) as caught:
        seeds.parse_yaml("seed/x.yaml", text)
    problem = caught.value.problems[0]
    assert (problem.source, problem.line, problem.field) == ("seed/x.yaml", line, field)


def test_every_file_is_read_before_problems_are_raised() -> None:
    with pytest.raises(seeds.SeedFileError) as caught:
        seeds.parse_files([("b.yaml", "entity: x\nrecords: []\n"), ("a.yaml", "entity: y\nrecords: []\n")])
    assert [p.source for p in caught.value.problems] == ["a.yaml", "b.yaml"]


def test_csv_rows_name_their_line_and_entity() -> None:
    text = "code,title,unit_price,_submit\nBOLT,Bolt,0.12,\n\nNUT,Nut,0.04,true\n"
    rows = seeds.parse_files([("seed/10-stock.item.csv", text)])
    assert [(r.entity, r.line, r.values, r.submit) for r in rows] == [
        ("stock/item", 2, {"code": "BOLT", "title": "Bolt", "unit_price": "0.12"}, False),
        ("stock/item", 4, {"code": "NUT", "title": "Nut", "unit_price": "0.04"}, True),
    ]
    with pytest.raises(seeds.SeedFileError) as caught:
        seeds.parse_csv("x.csv", "a,b\n1\n", "m/e")
    assert str(caught.value.problems[0]) == "x.csv:2: 1 cells for 2 columns"


def test_relative_dates_resolve_against_the_run_day() -> None:
    today = dt.date(2026, 3, 1)
    given = {"a": "today-1", "b": ["today + 2", "today"], "c": {"d": "todays"}, "e": 3}
    assert seeds.resolve_dates(given, today) == {
        "a": "2026-02-28",
        "b": ["2026-03-03", "today"],
        "c": {"d": "todays"},
        "e": 3,
    }


def test_the_digest_follows_the_row_not_its_place() -> None:
    one = seeds.parse_yaml("a.yaml", "entity: a/b\nrecords:\n  - {x: today}\n")[0]
    moved = seeds.parse_yaml("b.yaml", "# moved\n\nentity: a/b\nrecords:\n  - {x: today}\n")[0]
    changed = seeds.parse_yaml("a.yaml", "entity: a/b\nrecords:\n  - {x: today, _submit: true}\n")[0]
    assert one.digest() == moved.digest() != changed.digest()


# --- the CSV dialect (csvdialect) -------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(["a", "b", ",", '"', "\r", "\n", "\x00", "'", "=", " "]), max_size=40)
)
def test_the_reader_only_ever_raises_its_own_error(text: str) -> None:
    try:
        table = csvdialect.read(text)
    except csvdialect.CsvError as exc:
        where = (exc.line, exc.column)
    else:
        where = (1, 1)
        assert all(isinstance(c, str) for _, cells in table.records for c in cells)
    assert min(where) >= 1


@given(st.text(max_size=20))
def test_the_formula_guard_reads_back_what_it_wrote(text: str) -> None:
    written = csvdialect.guarded(text)
    assert csvdialect.unguarded(written) == text
    assert not written or written[0] not in csvdialect.TRIGGERS or csvdialect._NUMBER.fullmatch(written)


def test_csv_seed_cells_stay_text_for_the_loader_to_type() -> None:
    rows = seeds.parse_csv("stock.item.csv", "code,qty,_submit\nA,17,1\nB,'=x,FALSE\n", "stock/item")
    assert [(r.values, r.submit, r.cells) for r in rows] == [
        ({"code": "A", "qty": "17"}, True, True),
        ({"code": "B", "qty": "=x"}, False, True),
    ]


def test_a_byte_order_mark_is_not_part_of_the_first_column() -> None:
    rows = seeds.parse_files([("stock.item.csv", "\ufeffcode,title\nA,Bolt\n")])
    assert rows[0].values == {"code": "A", "title": "Bolt"}
