"""Staged loading: the spec is built first and the JSON Schema pass runs later, with the same result.

``dap serve`` stages the spec so that the schema pass (whose validators take ~0.3 s to compile)
runs while Postgres creates the tables. Staging must never let through a spec the plain loader
refuses: a document that only the schema rejects (pydantic would coerce it) fails ``confirm`` with
the same problems, and a document pydantic rejects fails staging itself with the plain loader's
problems.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dap import config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "procurement"

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: shop}\nspec: {title: Shop}\n"


def entity(fields: str) -> dict[str, str]:
    return {
        "shop/module.yaml": MODULE,
        "shop/item.yaml": f"""apiVersion: dap.io/v1
kind: Entity
metadata: {{name: item, module: shop}}
spec:
  fields:
{fields}
""",
    }


def test_staged_spec_equals_the_loaded_spec() -> None:
    files = config.read_files(EXAMPLE)
    staged = config.stage_files(files)
    staged.confirm()
    assert staged.spec.manifests == config.load_files(files).manifests
    assert len(staged.documents) == len(staged.spec.manifests)


def test_a_document_only_the_schema_refuses_fails_confirm_with_the_plain_problems() -> None:
    # pydantic's lax mode would turn "12" into 12; the JSON Schema says integer
    files = entity("    - {name: qty, type: decimal, precision: '12'}")
    with pytest.raises(config.SpecError) as plain:
        config.load_files(files)
    staged = config.stage_files(files)
    with pytest.raises(config.SpecError) as confirmed:
        staged.confirm()
    assert confirmed.value.problems == plain.value.problems
    assert any(p.path.endswith("precision") for p in confirmed.value.problems)


def test_a_document_the_models_refuse_fails_staging_with_the_plain_problems() -> None:
    files = entity("    - {name: qty, type: nonsense}")
    with pytest.raises(config.SpecError) as plain:
        config.load_files(files)
    with pytest.raises(config.SpecError) as staged:
        config.stage_files(files)
    assert staged.value.problems == plain.value.problems


def test_cross_document_rules_run_while_staging() -> None:
    files = entity("    - {name: maker, type: relation, relation: {entity: shop/nowhere}}")
    with pytest.raises(config.SpecError) as staged:
        config.stage_files(files)
    assert "nowhere" in str(staged.value)
