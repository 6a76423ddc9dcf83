"""The Role kind (the permission catalogue) and the row-scope, create-scope and backdate rules."""

from __future__ import annotations

import textwrap

import pytest

from dap import config
from dap.config import roles

MODULE = """
apiVersion: dap.io/v1
kind: Module
metadata: {name: shop}
"""
SUPPLIER = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: supplier, module: shop}
spec:
  fields:
    - {name: region, type: string}
"""


def role(name: str, spec: str = "{}") -> str:
    return f"apiVersion: dap.io/v1\nkind: Role\nmetadata: {{name: {name}}}\nspec: {spec}\n"


def entity(spec: str, name: str = "order") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {{name: {name}, module: shop}}\nspec:\n{body}\n"


def load(*documents: str) -> config.Spec:
    return config.load_files({"shop.yaml": "\n---\n".join([MODULE, SUPPLIER, *documents])})


def problems_of(*documents: str) -> list[config.Problem]:
    with pytest.raises(config.SpecError) as caught:
        load(*documents)
    return caught.value.problems


def test_roles_load_and_are_indexed_by_name() -> None:
    spec = load(
        role("buyer", "{title: Buyer, permissions: [shop.order.create, 'shop.order.*']}"),
        role("manager", "{permissions: ['*.approve'], includes: [buyer]}"),
    )
    assert set(spec.roles) == {"buyer", "manager"}
    assert spec.roles["buyer"].spec.permissions == ("shop.order.create", "shop.order.*")
    assert spec.roles["manager"].spec.includes == ("buyer",)


def test_the_schema_knows_the_role_kind() -> None:
    schema = config.manifest_schema()
    assert "Role" in schema["properties"]["kind"]["enum"]
    assert "RoleManifest" in schema["definitions"]


BROKEN = [
    pytest.param(role("admin"), "metadata.name", "'admin' is built in", id="admin-is-built-in"),
    pytest.param(
        role("buyer", "{includes: [clerk]}"),
        "spec.includes[0]",
        "'clerk' is not declared",
        id="include-exists",
    ),
    pytest.param(
        role("buyer", "{permissions: [Shop.Order]}"),
        "spec.permissions[0]",
        "does not match the pattern",
        id="pattern-grammar",
    ),
    pytest.param(
        role("buyer", "{permissions: ['shop..order']}"),
        "spec.permissions[0]",
        "does not match the pattern",
        id="pattern-empty-segment",
    ),
    pytest.param(
        "apiVersion: dap.io/v1\nkind: Role\nmetadata: {name: buyer, module: shop}\nspec: {}\n",
        "metadata.module",
        "not part of a module",
        id="role-is-module-less",
    ),
    pytest.param(
        role("buyer", "{colour: red}"), "spec.colour", "unknown key 'colour'", id="role-unknown-key"
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, required_permission: 'shop.*'}]"),
        "spec.fields[0].required_permission",
        "is not a permission name",
        id="field-permission-is-a-name",
    ),
    pytest.param(
        entity("actions: [{name: create, required_permission: 'Create'}]"),
        "spec.actions[0].required_permission",
        "is not a permission name",
        id="action-permission-is-a-name",
    ),
    pytest.param(
        entity("fields: [{name: note, type: string}]\nbackdate: {max_days_back: 3}"),
        "spec.backdate",
        "needs the transaction date",
        id="backdate-needs-a-date",
    ),
    pytest.param(
        entity("fields: [{name: day, type: string}]\nbackdate: {max_days_back: 3, date_field: day}"),
        "spec.backdate.date_field",
        "must name a date field",
        id="backdate-date-field-is-a-date",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: region, type: string}, {name: supplier, type: string}]
            create_scope: {field: region, ref_field: supplier, via: shop.supplier, via_field: region}
            """
        ),
        "spec.create_scope.ref_field",
        "must be a single relation field",
        id="create-scope-ref-is-a-relation",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: buyer, type: string, read_only: true}]
            assignments: [{dimension: buyer, field: buyer, principal_field: username}]
            """
        ),
        "spec.assignments[0].field",
        "must be writable",
        id="assignment-field-writable",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: day, type: date}]
            fixed_filters: [{field: day, from: session, attr: since, op: between}]
            """
        ),
        "spec.fixed_filters[0].op",
        "cannot take a value from the session",
        id="session-op",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: tags, type: string, multiple: true}]
            filters: [{field: tags, from: session, attr: tag}]
            """
        ),
        "spec.filters[0].field",
        "cannot carry row scope",
        id="scope-field-scalar",
    ),
]


@pytest.mark.parametrize(("document", "path", "message"), BROKEN)
def test_broken_roles_and_scopes_are_refused(document: str, path: str, message: str) -> None:
    problems = problems_of(document)
    assert any(p.path == path and message in p.message for p in problems), problems


def test_an_include_cycle_is_refused_naming_the_cycle() -> None:
    problems = problems_of(
        role("a", "{includes: [b]}"), role("b", "{includes: [c]}"), role("c", "{includes: [a]}"), role("d")
    )
    cycles = [p for p in problems if "cycle" in p.message]
    assert {p.path for p in cycles} == {"spec.includes"}
    assert any("a -> b -> c -> a" in p.message for p in cycles), cycles
    assert len(cycles) == 3  # each role of the cycle, not d


def test_a_conventional_transaction_date_satisfies_the_backdate_policy() -> None:
    spec = load(
        entity(
            """
            characteristic: transaction
            fields: [{name: note, type: string}, {name: posting_date, type: date}, {name: date, type: date}]
            backdate: {max_days_back: 3}
            """
        )
    )
    found = spec.entities["shop/order"].spec.transaction_date_field()
    assert found is not None and found.name == "posting_date"


def test_the_procurement_example_declares_its_roles() -> None:
    from pathlib import Path

    spec = config.load_spec(Path(__file__).parents[2] / "examples" / "procurement")
    assert {"buyer", "buying_manager", "finance"} <= set(spec.roles)


@pytest.mark.parametrize(
    ("pattern", "permission", "expected"),
    [
        pytest.param("shop.order.create", "shop.order.create", True, id="exact"),
        pytest.param("shop.order.create", "shop.order.created", False, id="exact-is-whole"),
        pytest.param("shop.*", "shop.order.create", True, id="star-spans-dots"),
        pytest.param("shop.*", "shopping.order.create", False, id="prefix-is-a-segment"),
        pytest.param("*.approve", "buying.purchase_order.approve", True, id="leading-star"),
        pytest.param("*", "anything.at.all", True, id="everything"),
        pytest.param("shop.order_*", "shop.order_line.read", True, id="star-inside-segment"),
        pytest.param("shop.o.x", "shop.order.x", False, id="dot-is-literal"),
    ],
)
def test_pattern_matching(pattern: str, permission: str, expected: bool) -> None:
    assert roles.matches(pattern, permission) is expected
