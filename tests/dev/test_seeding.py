"""``dap dev`` seeds and auto-approves (issue 32): a bad seed loads nothing and names the row while
dev goes on serving; ``--auto-approve`` grants what waits for approvers, saying so; ``--no-seed``
starts empty. Real ``dap dev`` processes, as in ``test_dev_sessions``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dap.dev import tokens
from tests.devsessions import REPO, DevSession

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "procurement"
TOKEN = tokens.dev_token()


def test_a_bad_seed_loads_nothing_names_the_row_and_dev_serves_on(tmp_path: Path) -> None:
    spec = tmp_path / "procurement"
    shutil.copytree(EXAMPLE, spec)
    items = spec / "seed" / "10-items.yaml"
    items.write_text(items.read_text().replace("unit_price: 4.20", "unit_price: cheap"))
    with DevSession("--spec", str(spec), data_dir=tmp_path / ".dap") as session:
        session.wait_for("Ctrl-C stops everything")
        assert "problem(s); nothing was loaded" in session.output, session.output
        assert f"{spec}/seed/10-items.yaml:10: unit_price: " in session.output, session.output
        status, body = session.call("GET", "/default/api/buying/supplier", token=TOKEN)
        assert (status, body["data"]) == (200, []), "nothing of the other files either"
        session.stop()
    with DevSession("--spec", str(spec), "--no-seed", data_dir=tmp_path / ".dap") as session:
        session.wait_for("Ctrl-C stops everything")
        assert "seed:" not in session.output
        session.stop()


def test_auto_approve_grants_the_waiting_approvals_and_says_so(tmp_path: Path) -> None:
    with DevSession("--spec", str(EXAMPLE), "--auto-approve", data_dir=tmp_path / ".dap") as session:
        session.wait_for("Ctrl-C stops everything")
        session.wait_for("the approval is approved", within=30)
        session.wait_for("the approval is approved", within=30, since=session.output.index("is approved") + 1)
        status, body = session.call(
            "GET", "/default/api/buying/purchase_order?state=approved&count=true", token=TOKEN
        )
        assert (status, body["total"]) == (200, 3), body  # the seeded one and the two that waited
        status, inbox = session.call("GET", "/default/api/_approvals", token=TOKEN)
        assert (status, inbox["data"]) == (200, []), inbox
        assert "approved by dap-dev-auto-approve-1 (dev mode)" in session.output
        status, trail = session.call(
            "GET", f"/default/api/buying/purchase_order/{_approved_id(session)}/_audit", token=TOKEN
        )
        assert any(
            e.get("actor", {}).get("username", e.get("actor_username", "")).startswith("dap-dev-auto-approve")
            or "dap-dev-auto-approve" in str(e)
            for e in trail["data"]
        ), trail
        session.stop()


def _approved_id(session: DevSession) -> str:
    status, body = session.call(
        "GET", "/default/api/buying/purchase_order?state=approved&sort=-order_date&limit=1", token=TOKEN
    )
    assert status == 200, body
    return str(body["data"][0]["id"])
