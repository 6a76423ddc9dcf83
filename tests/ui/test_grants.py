"""Grant requests between apps in the browser (issue 47), on the procurement example: the supplier
portal's page disables its orders block while purchasing has not granted the call, saying why; a
buying manager finds the request in the approval inbox and grants it; the page then runs the call.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from .conftest import UiServer, shot, signed_in
from .test_access import violations


def test_a_missing_grant_disables_the_block_and_the_owner_grants_it(
    ui_server: UiServer, browser: Any
) -> None:
    page = signed_in(browser, ui_server, "max", ["buying_manager"])
    page.goto(f"{ui_server.url}#/a/supplier/portal/my_orders")
    notice = page.locator(".grants-missing")
    expect(notice).to_contain_text(
        "Purchasing has not yet decided on the access of Supplier portal to open_orders"
    )
    expect(page.locator(".block.blocked")).to_contain_text("an administrator of Purchasing decides it")
    expect(page.locator(".context-problems")).to_have_count(0)  # the call was not made
    assert violations(page) == []
    shot(page, "grants-portal-pending")

    page.goto(f"{ui_server.url}#/a/buying/purchasing/approvals_page")
    requests = page.locator("section.grants")
    expect(requests).to_contain_text("supplier/portal")
    expect(requests).to_contain_text("open_orders")
    assert violations(page) == []
    shot(page, "grants-inbox")
    requests.get_by_role("button", name="grant supplier/portal buying/supplier_desk").click()
    expect(requests.locator(".notice")).to_contain_text("supplier/portal: granted.")
    expect(requests.get_by_role("button", name="revoke supplier/portal buying/supplier_desk")).to_be_visible()

    page.goto(f"{ui_server.url}#/a/supplier/portal/my_orders")
    page.reload()  # the app's metadata is read when the UI loads
    # granted: the call is made (the demo registers no handler, so it fails and says so)
    expect(page.locator(".context-problems")).to_contain_text("Context orders:")
    expect(page.locator(".grants-missing")).to_have_count(0)
    page.context.close()
