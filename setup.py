"""Build hook: a wheel built from a checkout carries the UI bundle.

The bundle (dap/server/web/bundle) is a build output of ui/ and is not committed, so a wheel of a
clean clone had none and ``dap serve`` answered the API only. Before the Python files are
collected, ``build_py`` builds it (``npm ci`` and ``npm run build`` in ui/) when it is missing, ui/
is there and npm is on the PATH. Where the bundle is already built (``make ui``, the image
build's context) nothing runs; an editable install (``make install``) leaves it to ``make ui``.
Without npm the wheel is built without the bundle and says so; DAP_REQUIRE_UI=1 makes that an
error. Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
UI = ROOT / "ui"
BUNDLE = ROOT / "dap" / "server" / "web" / "bundle"


class BuildWithUi(build_py):
    def run(self) -> None:
        if not getattr(self, "editable_mode", False) and not (BUNDLE / "index.html").is_file():
            build_ui()
        super().run()


def build_ui() -> None:
    npm = shutil.which("npm")
    if npm is None or not (UI / "package.json").is_file():
        why = "npm not found" if npm is None else "no ui/ sources"
        if os.environ.get("DAP_REQUIRE_UI") == "1":
            raise SystemExit(f"dap: cannot build the UI bundle ({why}) and DAP_REQUIRE_UI=1")
        print(f"dap: building without the UI bundle ({why}): dap serve will answer the API only")
        return
    print("dap: building the UI bundle (npm ci, npm run build in ui/)")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=UI, check=True)
    subprocess.run([npm, "run", "--silent", "build"], cwd=UI, check=True)


setup(cmdclass={"build_py": BuildWithUi})
