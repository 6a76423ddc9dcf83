"""dap.config's public face is deliberate: adding or removing a name must be a visible decision."""

from __future__ import annotations

import dap.config

EXPECTED = {
    "KINDS",
    "Action",
    "AppManifest",
    "EntityManifest",
    "EntitySpec",
    "ExposeConfig",
    "Field",
    "FieldOption",
    "FormManifest",
    "Manifest",
    "ModuleManifest",
    "Origin",
    "PageManifest",
    "Problem",
    "ServiceManifest",
    "Spec",
    "SpecError",
    "StagedSpec",
    "TableManifest",
    "WorkspaceManifest",
    "durations",
    "enums",
    "load_files",
    "load_spec",
    "manifest_schema",
    "names",
    "read_files",
    "stage_files",
}


def test_public_names_are_pinned() -> None:
    assert set(dap.config.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(dap.config, name), name


def test_split_modules_keep_their_faces() -> None:
    """``expressions`` and ``validation`` stayed the faces when their work moved into smaller
    modules: the server imports these names from them."""
    from dap.config import expressions, validation

    assert set(expressions.__all__) >= {
        "Expression",
        "ExpressionError",
        "evaluate",
        "evaluate_condition",
        "parse",
    }
    for name in expressions.__all__:
        assert hasattr(expressions, name), name
    assert callable(validation.check) and len(validation.RULES) == 20
