"""The public face of dap.dev is deliberate: this list changes only on purpose."""

from __future__ import annotations

import dap.dev


def test_public_names() -> None:
    assert sorted(dap.dev.__all__) == ["DevConfig", "run", "tokens"]
    for name in dap.dev.__all__:
        assert hasattr(dap.dev, name), name
