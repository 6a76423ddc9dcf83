"""Prometheus and promtool for the metrics tests, built by ``tools/prometheus/build.sh`` from the Go
module proxy into ~/.cache/dap/prometheus once (``make test`` starts that build in the background,
and the first test that needs it waits for it); without a Go toolchain those tests skip saying so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BUILD = ROOT / "tools" / "prometheus" / "build.sh"
OBSERVABILITY = ROOT / "kustomize" / "observability"


def binaries() -> Path:
    """The directory of ``prometheus`` and ``promtool``, or a skip naming why there is none."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if done.returncode == 3:
        pytest.skip("no Go toolchain: Prometheus (the metrics backend of these tests) cannot be built here")
    if done.returncode != 0:
        raise AssertionError(f"building Prometheus failed: {done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])
