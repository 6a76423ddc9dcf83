"""How the UI names records and which related lists a record page shows (``web.ui_titles``),
on the procurement example and the browser tests' lending spec."""

from __future__ import annotations

from pathlib import Path

from dap import config
from dap.server.catalog import Catalog
from dap.server.web import ui_meta, ui_titles

ROOT = Path(__file__).parents[2]


def catalog(path: str) -> Catalog:
    return Catalog.from_spec(config.load_spec(ROOT / path))


def test_title_fields_of_the_procurement_example() -> None:
    c = catalog("examples/procurement")
    assert ui_titles.title_field(c, "buying/supplier") == "name"  # the orders' display_field
    assert ui_titles.title_field(c, "buying/purchase_order") == "number"  # engine-numbered key
    assert ui_titles.title_field(c, "stock/item") == "title"  # required string, not the code


def test_title_fields_and_related_lists_of_the_lending_spec() -> None:
    c = catalog("tests/ui/specs/lending")
    assert ui_titles.title_field(c, "lending/member") == "full_name"
    assert ui_titles.title_field(c, "lending/book") == "headline"  # not the ISBN (a natural key)
    assert ui_titles.related(c, "lending/member") == [
        {"entity": "lending/book", "field": "borrower", "title": "Book"}
    ]
    assert ui_titles.related(c, "lending/book") == []


def test_a_guarded_field_is_never_the_title() -> None:
    files = {
        "m.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: m}
spec: {title: M}
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: person, module: m}
spec:
  fields:
    - {name: secret_name, type: string, required: true, required_permission: m.person.secret}
    - {name: nickname, type: string, required: true}
  expose:
    - type: rest
""",
    }
    c = Catalog.from_spec(config.load_files(files))
    assert ui_titles.title_field(c, "m/person") == "nickname"


def test_the_period_field_tells_the_form_which_date_periods_judge() -> None:
    """The UI metadata names the date ``access.periods`` judges (the form reads a record dated in a
    closed period as read-only); an entity no period judges has none."""
    c = catalog("examples/procurement")
    assert ui_meta.entity_meta(c, "buying/purchase_order")["period_field"] == "order_date"
    assert ui_meta.entity_meta(c, "buying/supplier")["period_field"] is None  # master data
