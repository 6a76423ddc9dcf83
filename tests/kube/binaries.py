"""Where the control plane's binaries are: built by ``tools/k8s/build.sh`` into a cache, or given.

``ensure()`` runs the build script, which reuses the cache when every binary is there (under a
second) and builds otherwise (minutes; ``make test`` builds in the background and runs the tests
that need it in its second pass, marked ``late``, so there they only reuse). The one reason to
skip is a machine with no Go toolchain: the script says so with exit status 3 (binaries already
in the cache are reused without Go). A failing build is an error, never a skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "k8s" / "build.sh"
NO_GO = 3
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")


class NoToolchainError(Exception):
    """No Go toolchain: the binaries cannot be built on this machine."""


def ensure() -> Path:
    """The directory holding etcd, kube-apiserver, kube-controller-manager and kubectl."""
    result = subprocess.run(  # our own script, fixed arguments
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=3600, check=False
    )
    if result.returncode == NO_GO:
        raise NoToolchainError(result.stderr.strip())
    if result.returncode != 0:
        raise RuntimeError(f"tools/k8s/build.sh failed ({result.returncode}):\n{result.stderr[-4000:]}")
    directory = Path(result.stdout.strip().splitlines()[-1])
    missing = [n for n in NAMES if not (directory / n).is_file()]
    if missing:
        raise RuntimeError(f"tools/k8s/build.sh left no {', '.join(missing)} in {directory}")
    return directory
