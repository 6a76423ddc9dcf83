"""A re-declared standard action may tune who calls it and how it shows, never what it does:
``dap validate`` and the boot refuse any other key with SVC.VALIDATE.RESERVED_ACTION_MODIFIED."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dap import config
from dap.cli import main
from dap.config.validation import reserved
from dap.server import cli, errors

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: shop}\n"


def _entity(actions: str) -> str:
    return (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: order, module: shop}\nspec:\n"
        "  fields: [{name: title, type: string}]\n"
        "  lifecycle: true\n"
        f"  actions:\n{actions}"
    )


ALLOWED = """\
    - name: create
      description: Add an order.
      required_permission: shop.order.create
      audit: true
      conditions: [{script: "title != ''", message: a title is needed}]
      ui: {button_label: Add}
    - name: delete
      disabled: true
    - name: submit
      call: sync
"""


def _write(tmp_path: Path, actions: str) -> Path:
    (tmp_path / "module.yaml").write_text(MODULE)
    (tmp_path / "order.yaml").write_text(_entity(actions))
    return tmp_path


def test_the_allowed_keys_and_defaults_load() -> None:
    spec = config.load_files({"shop.yaml": MODULE + "---\n" + _entity(ALLOWED)})
    assert spec.entities["shop/order"].spec.action("create") is not None


@pytest.mark.parametrize(
    ("action", "key", "value"),
    [
        ("create", "emits", "made"),
        ("update", "call", "async"),
        ("delete", "rate_limit", "{requests: 5}"),
        ("submit", "expose", "[grpc]"),
        ("cancel", "impl", "{type: sidecar, handler: h}"),
        ("list", "idempotent", "true"),
    ],
)
def test_dap_validate_refuses_a_modified_standard_action(
    tmp_path: Path, action: str, key: str, value: str
) -> None:
    extra = "    - {name: made}\n" if key == "emits" else ""
    text = _entity(f"    - name: {action}\n      {key}: {value}\n")
    if extra:
        text += f"  events:\n{extra}"
    (tmp_path / "module.yaml").write_text(MODULE)
    (tmp_path / "order.yaml").write_text(text)
    out = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert out.exit_code == 1, out.output
    line = next(x for x in out.output.splitlines() if reserved.CODE in x)
    assert str(tmp_path / "order.yaml") in line or "order.yaml" in line
    assert f"spec.actions[0].{key}" in line
    assert "may set only name, description, required_permission, disabled, audit, conditions, ui" in line
    assert f"remove {key!r}" in line


def test_a_custom_action_keeps_every_key() -> None:
    actions = "    - name: ship\n      call: async\n      track: true\n      expose: [rest]\n"
    spec = config.load_files({"shop.yaml": MODULE + "---\n" + _entity(actions)})
    assert spec.entities["shop/order"].spec.action("ship") is not None


def test_the_boot_refuses_a_modified_standard_action(tmp_path: Path) -> None:
    spec_dir = _write(tmp_path, "    - name: update\n      params: {fields: [{name: why, type: string}]}\n")
    with pytest.raises(errors.BootRefused) as caught:
        cli.stage_catalog(spec_dir)
    assert reserved.CODE in str(caught.value)
    assert "spec.actions[0].params" in str(caught.value)


def test_the_bundled_examples_declare_no_modified_standard_action() -> None:
    root = Path(__file__).resolve().parents[2] / "examples" / "procurement"
    config.load_spec(root)  # raises on any problem, this rule's included
