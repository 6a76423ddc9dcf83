"""The public face of dap.control is deliberate: this test changes when it does."""

from __future__ import annotations

import dap.control


def test_public_names() -> None:
    assert sorted(dap.control.__all__) == [
        "AppName",
        "ArtifactId",
        "ClusterId",
        "ClusterInfo",
        "ControlError",
        "Envelope",
        "KeyId",
        "Placement",
        "Settings",
        "Signer",
        "WorkspaceId",
        "build_app",
        "canonical_json",
        "choose",
        "key_id",
        "serve",
        "verify",
    ]
    for name in dap.control.__all__:
        assert getattr(dap.control, name) is not None
