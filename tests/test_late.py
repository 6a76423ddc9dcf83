"""Every test that runs a binary built by tools/k8s, tools/dex, tools/grpcurl, tools/jaeger or
tools/prometheus is marked ``late``.

``make test`` builds those in the background while the first pytest pass runs, and runs the
``late`` tests after waiting for them (tests/conftest.py). A test module that starts using one
without being listed in ``LATE`` would wait for a build inside its own timeout on a cold machine.
"""

from __future__ import annotations

import re

from tests.conftest import LATE, ROOT

# how a test reaches each of those binaries
USES = re.compile(
    r"binaries\.ensure\(|dex\.running\(|\"grpcurl\" / \"build\.sh\"|jaeger_tool\.running\(|prometheus_tool\."
)


def test_every_module_that_needs_a_background_build_is_late() -> None:
    users = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("*.py")
        if path.name.startswith("test_") and USES.search(path.read_text())
    }
    assert users, "the pattern no longer finds the known users: update USES"
    assert sorted(u for u in users if not u.startswith(LATE)) == []


def test_the_late_modules_exist() -> None:
    assert [p for p in LATE if not (ROOT / p).exists()] == []
