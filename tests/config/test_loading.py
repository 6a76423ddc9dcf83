"""The demo spec loads, its lookups work, and the JSON Schema is a valid draft-07 document."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from dap import config
from dap.cli import main
from dap.config import durations
from dap.config.enums import ChildStorage, FieldType

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "procurement"


@pytest.fixture(scope="module")
def spec() -> config.Spec:
    return config.load_spec(EXAMPLE)


def test_example_loads_with_lookups(spec: config.Spec) -> None:
    assert set(spec.modules) == {"buying", "stock", "supplier", "ledger"}
    assert set(spec.entities) == {
        "buying/supplier",
        "buying/purchase_order",
        "stock/item",
        "ledger/journal_entry",
        "ledger/account_balance",
    }
    order = spec.entity("buying", "purchase_order")
    assert order is not None
    assert order.spec.lifecycle
    lines = order.spec.field("lines")
    assert lines is not None and lines.type is FieldType.CHILD
    assert lines.child is not None and lines.child.storage is ChildStorage.TABLE
    assert [e.key for e in spec.entities_of("buying")] == ["buying/purchase_order", "buying/supplier"]
    assert spec.resolve_entity("supplier", "buying") is spec.entities["buying/supplier"]
    assert spec.resolve_entity("buying.supplier", None) is spec.entities["buying/supplier"]
    assert "default" in spec.workspaces
    assert set(spec.events_of("buying/purchase_order")) == {"approval_requested", "approved"}
    assert spec.states_of("buying/purchase_order") == (
        "draft",
        "submitted",
        "cancelled",
        "open",
        "pending_approval",
        "approved",
        "rejected",
    )
    assert spec.states_of("stock/item") == ()
    rest = order.spec.rest()
    assert rest is not None and rest.allows("delete")
    supplier_rest = spec.entities["buying/supplier"].spec.rest()
    assert supplier_rest is not None and not supplier_rest.allows("delete")


def test_spec_is_immutable(spec: config.Spec) -> None:
    order = spec.entities["buying/purchase_order"]
    with pytest.raises(Exception, match="frozen"):
        order.spec.fields[0].name = "renamed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.entities["x/y"] = order  # type: ignore[index]


def test_schema_is_draft07_and_validates_the_example(spec: config.Spec) -> None:
    schema = config.manifest_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    validator = jsonschema.Draft7Validator(schema)
    bad = {"apiVersion": "dap.io/v1", "kind": "Entity", "metadata": {"name": "x"}, "spec": {"fields": "no"}}
    assert list(validator.iter_errors(bad))
    good = spec.entities["stock/item"].model_dump(by_alias=True, exclude_defaults=True, mode="json")
    assert not list(validator.iter_errors(good))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("300s", timedelta(seconds=300), id="seconds"),
        pytest.param("1h30m", timedelta(minutes=90), id="compound"),
        pytest.param("250ms", timedelta(milliseconds=250), id="millis"),
        pytest.param("7d", timedelta(days=7), id="days"),
    ],
)
def test_durations_parse(text: str, expected: timedelta) -> None:
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["", "5", "1.5h", "1m1h", "1h 30m", "1s1s", "-1s", "1w"])
def test_durations_refuse_anything_else(text: str) -> None:
    with pytest.raises(durations.DurationError, match=r"e\.g\. 300s"):
        durations.parse(text)


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["validate", str(EXAMPLE)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("valid: 4 modules, 5 entities")

    (tmp_path / "bad.yaml").write_text(
        "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: m}\n---\n"
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: e, module: m}\n"
        "spec: {fields: [{name: A, type: string}, {name: b, type: nope}]}\n---\n"
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: f, module: m}\n"
        "spec: {fields: [{name: c, type: string, currency: EUR}]}\n"
    )
    bad = runner.invoke(main, ["validate", str(tmp_path)])
    assert bad.exit_code == 1
    assert "bad.yaml#2 spec.fields[0].name:" in bad.output
    assert "bad.yaml#2 spec.fields[1].type:" in bad.output
    assert "bad.yaml#3 spec.fields[0].currency:" in bad.output, "a rule violation beside a schema error"
    assert "Traceback" not in bad.output

    usage = runner.invoke(main, ["validate", str(tmp_path / "missing")])
    assert usage.exit_code == 2


def test_cli_validate_reports_a_provider_the_server_could_not_use(tmp_path: Path) -> None:
    # the rule dap serve, registration and a pod's load apply (dap.config.providers), same words
    (tmp_path / "ws.yaml").write_text(
        "apiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: acme}\nspec:\n  auth:\n    providers:\n"
        "      corp: {issuer: 'https://id.example.com', client_id: dap, leeway: 600}\n"
    )
    bad = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert bad.exit_code == 1, bad.output
    assert "ws.yaml#1 spec.auth.providers.corp.leeway: auth provider 'corp': leeway is 0 to 120" in bad.output


def test_cli_schema_prints_json() -> None:
    import json

    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output)["title"].startswith("dap manifest")
