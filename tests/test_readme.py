"""The README's commands run as written (issue 18): every ``sh`` block, in order, in one shell.

A ``dap dev`` serves ``examples/procurement`` as ``make dev`` would; the blocks then run with
``bash -euo pipefail`` from a directory where ``.venv`` and ``examples`` are where the README
says, so ``.venv/bin/dap`` and relative paths work unchanged. Only the port differs (a free one
instead of 8080, which another process may hold). ``curl`` fails on any HTTP error, so a 403 or
422 anywhere fails the test. Blocks that run ``make`` are the ones this test is run by: skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devsessions import REPO, DevSession

pytestmark = pytest.mark.slow

CURL_FAILS_ON_HTTP_ERRORS = 'curl() { command curl --fail-with-body "$@"; }'


def runnable_blocks(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [block for block in blocks if not re.search(r"^\s*make\b", block, re.M)]


def test_the_blocks_are_found() -> None:
    blocks = runnable_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 4, "the README's runnable examples went missing"
    assert any("dap token" in block for block in blocks)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    blocks = runnable_blocks((REPO / "README.md").read_text())
    with DevSession("--spec", "examples/procurement", data_dir=tmp_path / ".dap", cwd=tmp_path) as dev:
        dev.wait_for("Ctrl-C stops everything")
        script = "\n".join(
            [CURL_FAILS_ON_HTTP_ERRORS, *(b.replace("http://127.0.0.1:8080", dev.base) for b in blocks)]
        )
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        dev.stop()
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert '"docstatus":"submitted"' in done.stdout, "the order was submitted"
    assert '"action":"submit"' in done.stdout, "and audited"
    # the README's order comes after the seeded ones (examples/procurement/seed): its number is the next
    assert re.search(r'"number":"PO-\d{4}-\d{5}","buyer":"bob"', done.stdout), "the buyer sees their order"
    assert '"transition":{"from":"open","to":"pending_approval"}' in done.stdout, "the state moved"
    assert '"state":"pending_approval"' in done.stdout, "and the list filters by it"
    assert "valid: 4 modules" in done.stdout
    assert (tmp_path / "dap-manifest.schema.json").stat().st_size > 1000
