"""The public face of dap.resource_pod is deliberate: this list changes only on purpose."""

from __future__ import annotations

import dap.resource_pod


def test_public_names() -> None:
    assert sorted(dap.resource_pod.__all__) == [
        "Phase",
        "Pod",
        "PodError",
        "Running",
        "Settings",
        "Status",
        "converging",
        "errors",
        "evidence",
        "loading",
        "start",
        "verifying",
    ]
    for name in dap.resource_pod.__all__:
        assert hasattr(dap.resource_pod, name), name
