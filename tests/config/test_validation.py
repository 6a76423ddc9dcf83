"""Every validation rule refuses a broken spec with a message that names file, document and path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dap import config

MODULE = """
apiVersion: dap.io/v1
kind: Module
metadata: {name: shop}
"""


def entity(spec: str, name: str = "order") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {{name: {name}, module: shop}}\nspec:\n{body}\n"


CUSTOMER = entity(
    """
    fields:
      - {name: title, type: string}
      - {name: region, type: string}
    """,
    name="customer",
)


def load(*documents: str) -> config.Spec:
    text = "\n---\n".join([MODULE, CUSTOMER, *documents])
    return config.load_files({"shop.yaml": text})


def problems_of(*documents: str) -> list[config.Problem]:
    with pytest.raises(config.SpecError) as caught:
        load(*documents)
    return caught.value.problems


BROKEN = [
    pytest.param(
        entity("fields: [{name: Total, type: money}]"),
        "spec.fields[0].name",
        "lower snake_case",
        id="field-name-pattern",
    ),
    pytest.param(
        entity(f"fields: [{{name: {'a' * 129}, type: string}}]"),
        "spec.fields[0].name",
        "is too long",
        id="field-name-length",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string}, {name: a, type: integer}]"),
        "spec.fields",
        "declared twice",
        id="field-name-unique",
    ),
    pytest.param(
        entity("fields: [{name: id, type: string}]"),
        "spec.fields[0].name",
        "system column",
        id="field-name-system-column",
    ),
    pytest.param(
        entity("fields: [{name: a, type: strin}]"),
        "spec.fields[0].type",
        "did you mean 'string'",
        id="field-type-unknown",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, titel: A}]"),
        "spec.fields[0].titel",
        "did you mean 'title'",
        id="unknown-key",
    ),
    pytest.param(
        entity("fields: [{name: a, type: integer, required: maybe}]"),
        "spec.fields[0].required",
        "expected boolean",
        id="wrong-type",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, currency: EUR}]"),
        "spec.fields[0].currency",
        "only to fields of type money",
        id="currency-only-money",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, options: [{value: x}]}]"),
        "spec.fields[0].multiple",
        "needs multiple",
        id="multiple-with-options",
    ),
    pytest.param(
        entity("fields: [{name: a, type: json, options: [{value: x}]}]"),
        "spec.fields[0].multiple",
        "needs multiple",
        id="multiple-with-options-json",
    ),
    pytest.param(
        entity("fields: [{name: a, type: money, computed: {}}]"),
        "spec.fields[0].computed.formula",
        "missing required key 'formula'",
        id="computed-formula-required",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, auto_fill: {from: b}}]"),
        "spec.fields[0].auto_fill.field",
        "missing required key 'field'",
        id="auto-fill-field-required",
    ),
    pytest.param(
        entity(
            "fields: [{name: b, type: string}, {name: a, type: string, auto_fill: {from: b, field: title}}]"
        ),
        "spec.fields[1].auto_fill.from",
        "relation field of the same row",
        id="auto-fill-from-relation",
    ),
    pytest.param(
        entity(
            """
            fields:
              - name: c
                type: relation
                relation: {entity: shop/customer}
              - name: a
                type: string
                auto_fill: {from: c, field: nothing}
            """
        ),
        "spec.fields[1].auto_fill.field",
        "has no field 'nothing'",
        id="auto-fill-field-exists",
    ),
    pytest.param(
        entity("fields: [{name: c, type: relation, relation: {entity: shop/ghost}}]"),
        "spec.fields[0].relation.entity",
        "'shop/ghost' is not a declared entity",
        id="relation-target-exists",
    ),
    pytest.param(
        entity("fields: [{name: c, type: relation}]"),
        "spec.fields[0].relation",
        "needs relation.entity",
        id="relation-needs-decl",
    ),
    pytest.param(
        entity("fields: [{name: c, type: child, child: {storage: table, entity: shop/ghost}}]"),
        "spec.fields[0].child.entity",
        "not a declared entity",
        id="child-target-exists",
    ),
    pytest.param(
        entity("fields: [{name: c, type: child, child: {storage: blob, fields: [{name: x, type: string}]}}]"),
        "spec.fields[0].child.storage",
        "use one of: jsonb, table",
        id="child-storage-enum",
    ),
    pytest.param(
        entity("fields: [{name: s, type: enum}]"),
        "spec.fields[0]",
        "needs enum_values or options",
        id="enum-needs-values",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string}]\ncache: {ttl: 2h}"),
        "spec.cache.ttl",
        "between 1s and 1h",
        id="cache-ttl-max",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string}]\ncache: {ttl: 500ms}"),
        "spec.cache.ttl",
        "between 1s and 1h",
        id="cache-ttl-min",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string}]\ncache: {ttl: 5 minutes}"),
        "spec.cache.ttl",
        "does not match the pattern",
        id="duration-strict",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string}]\nactions: [{name: go, emits: gone}]"),
        "spec.actions[0].emits",
        "event 'gone' is not declared",
        id="emits-declared-event",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            state_machine:
              states: [open, done]
              transitions: [{name: finish, from: opened, to: closed}]
            """
        ),
        "spec.state_machine.transitions[0].from",
        "'opened' is not a declared state",
        id="transition-from-state",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            state_machine:
              states: [open, done]
              transitions: [{name: finish, from: open, to: closed}]
            """
        ),
        "spec.state_machine.transitions[0].to",
        "'closed' is not a declared state",
        id="transition-to-state",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            state_machine:
              states: [open, done]
              transitions:
                - name: finish
                  from: open
                  to: done
                  approval:
                    steps: [{name: boss}]
                    on_reject: {to: nowhere}
            """
        ),
        "spec.state_machine.transitions[0].approval.on_reject.to",
        "'nowhere' is not a declared state",
        id="on-reject-state",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            state_machine:
              states: [open, done]
              transitions:
                - {name: finish, from: open, to: done, approval: {steps: [{name: boss, mode: all}]}}
            """
        ),
        "spec.state_machine.transitions[0].approval.steps[0].mode",
        "use mode: any with approvers: N, or mode: sequential",
        id="approval-mode-all-refused",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            state_machine:
              states: [open, done]
              transitions:
                - {name: finish, from: open, to: done, approval: {steps: [{name: Boss_Review}]}}
            """
        ),
        "spec.state_machine.transitions[0].approval.steps[0].name",
        "kebab-case",
        id="approval-step-name-pattern",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            events:
              - name: done
                deliver: [{channel: reliable_event, target: {resource: shop.ghost, action: create}}]
            """
        ),
        "spec.events[0].deliver[0].target.resource",
        "'shop.ghost' is not a declared entity",
        id="reliable-event-target-exists",
    ),
    pytest.param(
        entity(
            """
            fields: [{name: a, type: string}]
            events:
              - name: done
                deliver: [{channel: reliable_event, target: {resource: shop.customer, action: notify}}]
            """
        ),
        "spec.events[0].deliver[0].target.action",
        "has no action 'notify'",
        id="reliable-event-target-action",
    ),
    pytest.param(
        entity(
            """
            extends: {target: shop/customer, namespace: loyalty}
            fields: [{name: points, type: integer, required: true}]
            """,
            name="customer_loyalty",
        ),
        "spec.fields[0].required",
        "extension fields must not be required",
        id="extension-field-not-required",
    ),
    pytest.param(
        entity(
            "fields: [{name: a, type: string}]\n"
            "assignments: [{dimension: d, field: b, principal_field: username}]"
        ),
        "spec.assignments[0].field",
        "'b' is not a field",
        id="assignment-field-exists",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Form
metadata: {name: f, module: shop}
spec: {entity: shop/customer, fields: [{field: title}, {field: colour}]}
""",
        "spec.fields[1].field",
        "has no field 'colour'",
        id="form-field-exists",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: App
metadata: {name: a, module: shop}
spec: {pages: [home]}
""",
        "spec.pages[0]",
        "page 'home' is not declared",
        id="app-page-exists",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Module
metadata: {name: other}
spec: {dependencies: [{module: ghost}]}
""",
        "spec.dependencies[0].module",
        "module 'ghost' is not declared",
        id="dependency-module-exists",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: thing, module: nomodule}
spec: {fields: [{name: a, type: string}]}
""",
        "metadata.module",
        "module 'nomodule' is not declared",
        id="entity-module-exists",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Workspace
metadata: {name: api}
""",
        "metadata.name",
        "reserved URL segment",
        id="workspace-reserved-slug",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Workspace
metadata: {name: acme}
spec:
  auth:
    providers:
      corp: {issuer: "https://id.example.com", client_id: dap, algorithms: [RS256, HS256]}
""",
        "spec.auth.providers.corp.algorithms",
        "not ['HS256']",
        id="workspace-provider-hmac",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Workspace
metadata: {name: acme}
spec:
  auth:
    providers:
      corp: {issuer: "https://id.example.com", client_id: dap, leeway: 600}
""",
        "spec.auth.providers.corp.leeway",
        "leeway is 0 to 120 seconds",
        id="workspace-provider-leeway",
    ),
    pytest.param(
        """
apiVersion: dap.io/v1
kind: Gadget
metadata: {name: g}
""",
        "kind",
        "unknown kind 'Gadget'",
        id="unknown-kind",
    ),
    pytest.param(CUSTOMER, "metadata.name", "duplicate Entity 'shop/customer'", id="duplicate-manifest"),
    pytest.param(
        entity(
            "fields: [{name: qty, type: integer}, {name: total, type: integer, computed: {formula: 'qty *'}}]"
        ),
        "spec.fields[1].computed.formula",
        "invalid expression 'qty *'",
        id="formula-syntax",
    ),
    pytest.param(
        entity("fields: [{name: total, type: integer, computed: {formula: 'qty * 2'}}]"),
        "spec.fields[0].computed.formula",
        "uses 'qty', which is not a field here",
        id="formula-unknown-field",
    ),
    pytest.param(
        entity(
            """
            fields:
              - name: lines
                type: child
                child: {storage: jsonb, fields: [{name: amount, type: decimal}]}
              - {name: total, type: decimal, computed: {formula: "sum(lines.price)"}}
            """
        ),
        "spec.fields[1].computed.formula",
        "lines rows have no 'price'",
        id="formula-child-field",
    ),
    pytest.param(
        entity("fields: [{name: a, type: string, visible_when: 'eval(a)'}]"),
        "spec.fields[0].visible_when",
        "invalid expression",
        id="expression-function-whitelist",
    ),
    pytest.param(
        entity(
            "fields: [{name: a, type: string}]\n"
            "actions: [{name: go, conditions: [{script: 'b > 1', message: m}]}]"
        ),
        "spec.actions[0].conditions[0].script",
        "uses 'b'",
        id="condition-references",
    ),
]


@pytest.mark.parametrize(("document", "path", "message"), BROKEN)
def test_broken_spec_is_refused_with_a_located_message(document: str, path: str, message: str) -> None:
    problems = problems_of(document)
    matching = [p for p in problems if p.path == path and message in p.message]
    assert matching, f"expected {path}: ...{message}... in {[str(p) for p in problems]}"
    assert matching[0].file == "shop.yaml"
    assert matching[0].document == 3  # after the module and the customer


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(
        entity("fields: [{name: A, type: string}, {name: b, type: strin}]", name="one"),
        entity("fields: [{name: c, type: integer, required: maybe}]", name="two"),
    )
    assert {p.path for p in problems} >= {
        "spec.fields[0].name",
        "spec.fields[1].type",
        "spec.fields[0].required",
    }
    assert {p.document for p in problems} == {3, 4}


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(config.SpecError) as caught:
        config.load_files({"bad.yaml": "kind: Module\nmetadata: {name: [\n"})
    (problem,) = caught.value.problems
    assert problem.file == "bad.yaml"
    assert "YAML syntax error at line" in problem.message


def test_duplicate_yaml_key_is_an_error() -> None:
    with pytest.raises(config.SpecError) as caught:
        config.load_files(
            {"dup.yaml": "apiVersion: dap.io/v1\nkind: Module\nkind: Module\nmetadata: {name: m}\n"}
        )
    assert "duplicate key 'kind'" in caught.value.problems[0].message


def test_yes_and_dates_stay_strings() -> None:
    spec = load(entity("fields: [{name: answer, type: enum, enum_values: [yes, no], default: 2024-01-01}]"))
    field = spec.entity("shop", "order")
    assert field is not None
    answer = field.spec.fields[0]
    assert answer.enum_values == ("yes", "no")
    assert answer.default == "2024-01-01"


def test_non_yaml_files_are_ignored_and_directories_load(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "shop.yml").write_text(MODULE + "\n---\n" + CUSTOMER)
    (tmp_path / "script.py").write_text("print('not a manifest')")
    spec = config.load_spec(tmp_path)
    assert list(spec.entities) == ["shop/customer"]
    assert spec.origin(spec.entities["shop/customer"]) == config.Origin("sub/shop.yml", 2)


def test_deprecated_delivery_decl_loads_with_a_warning() -> None:
    spec = load(entity("fields: [{name: a, type: string}]\ndeliveries: [{event: done, channel: audit_log}]"))
    assert any("deprecated" in w.message for w in spec.warnings)


def test_empty_input_is_an_error() -> None:
    with pytest.raises(config.SpecError) as caught:
        config.load_files({"README.md": b"# not yaml"})
    assert "no manifests found" in caught.value.problems[0].message


def test_a_structural_problem_does_not_hide_a_rule_violation_in_another_document() -> None:
    problems = problems_of(
        entity("fields: [{name: b, type: strin}]", name="one"),  # fails its JSON Schema
        entity("fields: [{name: a, type: string, currency: EUR}]", name="two"),  # breaks a rule
    )
    assert [(p.document, p.path) for p in problems] == [
        (3, "spec.fields[0].type"),
        (4, "spec.fields[0].currency"),
    ]


def test_references_to_a_broken_document_are_not_reported_as_undeclared() -> None:
    """The broken entity exists, so pointing at it is no second mistake; a real typo still is."""
    problems = problems_of(
        entity("fields: [{name: b, type: strin}]", name="one"),
        entity(
            "fields: [{name: o, type: relation, relation: {entity: one}}, "
            "{name: g, type: relation, relation: {entity: ghost}}]",
            name="two",
        ),
    )
    assert [(p.document, p.path) for p in problems] == [
        (3, "spec.fields[0].type"),
        (4, "spec.fields[1].relation.entity"),
    ]


def test_an_unreadable_file_silences_only_references_it_might_declare() -> None:
    text = "\n---\n".join(
        [
            MODULE,
            entity(
                "fields: [{name: g, type: relation, relation: {entity: ghost}}, "
                "{name: a, type: string, currency: EUR}]"
            ),
        ]
    )
    with pytest.raises(config.SpecError) as caught:
        config.load_files({"bad.yaml": "kind: Entity\nmetadata: {name: [\n", "shop.yaml": text})
    problems = caught.value.problems
    assert [(p.file, p.path) for p in problems] == [
        ("bad.yaml", ""),
        ("shop.yaml", "spec.fields[1].currency"),
    ]
