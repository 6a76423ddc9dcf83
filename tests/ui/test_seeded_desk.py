"""The seeded desk (issue 32): ``dap serve`` of examples/procurement opens empty (it never seeds),
``dap seed`` loads the demo's seed into the running server's database, and the dashboard, the
board and a committee member's inbox then show what the seed files say, in Chromium.

The expected figures are counted from the seed files themselves (``workflows.seeds``), never
typed here, so a changed seed changes what the page must show.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from dap.server.workflows import seeds
from tests.conftest import fresh_database

from .conftest import ADMIN, ARTIFACTS, BUNDLE, DAP, SECRET, SPEC, UiServer, _port, chromium_path, shot

PASSWORD = "procurement-demo"


def seed_rows() -> list[seeds.Row]:
    return seeds.parse_files([(p.name, p.read_text()) for p in sorted((SPEC / "seed").glob("*.yaml"))])


def expected() -> dict[str, int]:
    """What the dashboard must show, from the seed files: orders, drafts, suppliers, and the orders
    each state reaches (a row's last step decides it)."""
    rows = seed_rows()
    orders = [r for r in rows if r.entity == "buying/purchase_order"]

    def state(row: seeds.Row) -> str:
        if row.votes:
            if not all(v.approve for v in row.votes):
                return "rejected"
            committee = sum(1 for v in row.votes if "purchase_committee" in v.roles)
            manager = sum(1 for v in row.votes if "buying_manager" in v.roles)
            return "approved" if committee >= 2 and manager >= 1 else "pending_approval"
        return "pending_approval" if "request_approval" in row.actions else "open"

    counts = {
        "orders": len(orders),
        "drafts": sum(1 for r in orders if not r.submit and "submit" not in r.actions),
        "suppliers": sum(1 for r in rows if r.entity == "buying/supplier"),
        "waiting_for_committee": sum(1 for r in orders if "approve" in r.actions and not r.votes),
    }
    for name in ("open", "pending_approval", "approved", "rejected"):
        counts[name] = sum(1 for r in orders if state(r) == name)
    return counts


@pytest.fixture(scope="module")
def seeded(pg_server_dsn: str) -> Iterator[UiServer]:
    if not (BUNDLE / "index.html").is_file():
        pytest.skip("no UI bundle: run `make ui` (needs npm) to build dap/server/web/bundle")
    if chromium_path() is None:
        pytest.skip("Chromium not found: `apt-get install -y chromium` (make test does it when root)")
    _name, dsn = fresh_database(pg_server_dsn)
    port, admin_port = _port(), _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update({"DAP_DSN": dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": "http://ui.example"})
    args = [DAP, "serve", "--spec", str(SPEC), "--addr", f"127.0.0.1:{port}"]
    args += ["--metrics-addr", f"127.0.0.1:{admin_port}", "--admin-secret", ADMIN, "--web-dir", str(BUNDLE)]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / "seeded-server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(args, env=env, stderr=sink, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while "dap serve: listening" not in (said := log.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dap serve did not start: {said[-2000:]}")
            time.sleep(0.1)
        api = f"http://127.0.0.1:{port}"
        server = UiServer(url=f"{api}/default/", api=api, admin=f"http://127.0.0.1:{admin_port}")
        status, items = server.call(
            "GET", "api/stock/item?count=true&limit=1", server.token("root", ["admin"])
        )
        assert (status, items["total"]) == (200, 0), "dap serve never seeds"
        loaded = subprocess.run(
            [DAP, "seed", str(SPEC), "--dsn", dsn, "--workspace", "default"],
            env={k: v for k, v in os.environ.items() if not k.startswith("DAP_")},
            capture_output=True,
            text=True,
            timeout=120,
        )  # on the running server's database, as on a production one
        assert loaded.returncode == 0, loaded.stderr
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def login(server: UiServer, username: str) -> str:
    request = urllib.request.Request(
        f"{server.api}/default/_ui/login",
        data=json.dumps({"username": username, "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return str(json.load(resp)["token"])


def page_as(browser: Any, server: UiServer, token: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"sessionStorage.setItem('dap.token.default', {token!r})")
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


def test_the_dashboard_counts_what_the_seed_says(seeded: UiServer, browser: Any) -> None:
    want = expected()
    assert want["orders"] and want["drafts"] and want["waiting_for_committee"] == 1
    page = page_as(browser, seeded, login(seeded, "admin"))  # a seeded account signs in
    page.goto(seeded.url + "#/a/buying/purchasing/overview")
    expect(page.get_by_role("region", name="Orders", exact=True).locator(".figure")).to_have_text(
        str(want["orders"])
    )
    expect(page.get_by_role("region", name="Drafts to submit").locator(".figure")).to_have_text(
        str(want["drafts"])
    )
    expect(page.get_by_role("region", name="Suppliers").locator(".figure")).to_have_text(
        str(want["suppliers"])
    )
    chart = page.get_by_role("region", name="Orders by state")
    for label, state in (
        ("Open", "open"),
        ("Pending approval", "pending_approval"),
        ("Approved", "approved"),
        ("Rejected", "rejected"),
    ):
        expect(chart.locator("li", has_text=label).locator(".bar-value")).to_have_text(str(want[state]))
    latest = page.get_by_role("region", name="Latest orders")
    expect(latest.locator("tbody tr")).to_have_count(min(5, want["orders"]))
    shot(page, "seeded-dashboard")
    page.context.close()


def test_a_committee_member_finds_the_waiting_approval(seeded: UiServer, browser: Any) -> None:
    page = page_as(browser, seeded, login(seeded, "ada"))
    page.goto(seeded.url + "#/a/buying/review/approvals_page")
    # one row waiting at the committee step (the rightbar's recent orders name the supplier too)
    waiting = page.locator("tr", has_text="Purchase committee (0 of 2)")
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text("Baltic Lubricants")
    expect(waiting.get_by_role("button", name="Approve")).to_be_visible()
    shot(page, "seeded-inbox")
    page.context.close()
