"""The saga form (``impl: {type: saga, steps}``): refused with file and path where it is wrong,
accepted and described by ``dap schema`` where it is right."""

from __future__ import annotations

import textwrap

import pytest

from dap import config
from dap.config import schema

from .test_validation import load, problems_of


def service(actions: str) -> str:
    body = textwrap.indent(textwrap.dedent(actions).strip(), "    ")
    return (
        "apiVersion: dap.io/v1\nkind: Service\nmetadata: {name: desk, module: shop}\n"
        f"spec:\n  expose: [{{type: rest}}]\n  actions:\n{body}\n"
    )


def saga(steps: str, head: str = "call: async, track: true") -> str:
    return service(f"- {{name: book, {head}, impl: {{type: saga, steps: {steps}}}}}")


GOOD = """[
  {name: reserve, sidecar: shop/app/reserve, compensation: {sidecar: shop/app/release}, timeout: 5s,
   retries: 2, status: {sidecar: shop/app/reserved}},
  {name: note, record: {entity: shop/customer, op: create, values: {title: who}},
   compensation: {record: {entity: shop/customer, op: delete, of: note}}},
  {name: notify, http: {url: 'https://example.org/notify'}, compensation: none}
]"""


def test_a_saga_with_every_kind_of_step_is_accepted() -> None:
    spec = load(saga(GOOD))
    (action,) = spec.services["shop/desk"].spec.actions
    assert action.impl is not None
    assert [s.kind for s in action.impl.steps] == ["sidecar", "record", "http"]
    assert action.impl.steps[2].compensation == "none"


BROKEN = [
    pytest.param(
        saga("[{name: a, http: {url: 'http://x'}}]"),
        "steps[0].compensation",
        "missing required key",
        id="no-compensation",
    ),
    pytest.param(
        saga("[{name: a, compensation: none}]"), "impl.steps[0]", "exactly one target", id="no-target"
    ),
    pytest.param(
        saga("[{name: a, native: x, http: {url: 'http://x'}, compensation: none}]"),
        "impl.steps[0]",
        "names native, http",
        id="two-targets",
    ),
    pytest.param(saga("[]"), "impl", "at least one step", id="no-steps"),
    pytest.param(
        saga("[{name: a, native: x, compensation: none}, {name: a, native: y, compensation: none}]"),
        "impl",
        "a repeated",
        id="doubled-names",
    ),
    pytest.param(
        saga("[{name: a, native: x, compensation: none}]", head="call: async"),
        "spec.actions[0]",
        "tracked job",
        id="untracked",
    ),
    pytest.param(
        saga("[{name: a, native: x, compensation: none, status: {native: y}}]"),
        "impl.steps[0]",
        "never unknown",
        id="native-status",
    ),
    pytest.param(
        saga("[{name: a, native: x, compensation: none, timeout: soon}]"), "timeout", "", id="bad-timeout"
    ),
    pytest.param(
        saga("[{name: a, record: {entity: shop/nothing, op: create}, compensation: none}]"),
        "spec.actions[0].impl.steps[0].record.entity",
        "not a declared entity",
        id="unknown-entity",
    ),
    pytest.param(
        saga("[{name: a, native: x, compensation: {record: {entity: shop/customer, op: delete, of: b}}}]"),
        "impl",
        "earlier step",
        id="delete-of-later",
    ),
]


@pytest.mark.parametrize(("document", "path", "message"), BROKEN)
def test_a_broken_saga_is_refused_with_a_located_message(document: str, path: str, message: str) -> None:
    problems = problems_of(document)
    matching = [p for p in problems if path in p.path and message in p.message]
    assert matching, f"expected {path}: ...{message}... in {[str(p) for p in problems]}"
    assert matching[0].file == "shop.yaml" and matching[0].document == 3


def test_an_entity_action_cannot_be_a_saga() -> None:
    entity = (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: order, module: shop}\nspec:\n"
        "  fields: [{name: title, type: string}]\n"
        "  actions: [{name: book, call: async, track: true, impl: {type: saga, steps: "
        "[{name: a, native: x, compensation: none}]}}]\n"
    )
    problems = problems_of(entity)
    assert any(p.path == "spec.actions[0].impl.type" and "service action" in p.message for p in problems)


def test_dap_schema_describes_the_saga_form() -> None:
    definitions = schema.manifest_schema()["definitions"]
    assert "saga" in str(definitions["ImplDecl"]["properties"]["type"])
    step = definitions["SagaStep"]
    assert {
        "name",
        "compensation",
        "timeout",
        "retries",
        "status",
        "sidecar",
        "http",
        "native",
        "record",
    } <= set(step["properties"])
    assert "compensation" in step["required"]
    assert isinstance(config.Spec, type)
