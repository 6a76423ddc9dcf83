"""``pip wheel`` of a clean checkout carries the UI bundle (setup.py builds it with npm).

The checkout is a ``git clone`` of this repository's HEAD: no node_modules, no built bundle, as a
user's clone would be. Slow (npm ci, a Vite build, pip's isolated build environment from the
index); skips without git, npm or a repository.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT


@pytest.mark.slow
def test_wheel_of_a_clean_clone_has_the_bundle(tmp_path: Path) -> None:
    if shutil.which("git") is None or shutil.which("npm") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git, npm and a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(clone)], check=True)
    assert not (clone / "dap" / "server" / "web" / "bundle").exists()
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(clone)],
        check=True,
        timeout=600,
    )
    [wheel] = out.glob("dap-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dap/server/web/bundle/index.html" in names
    assets = [n for n in names if n.startswith("dap/server/web/bundle/assets/")]
    assert any(n.endswith(".js") for n in assets) and any(n.endswith(".css") for n in assets), assets
