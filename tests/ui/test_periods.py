"""Accounting periods in the browser (issue 43), on the procurement example: an administrator
closes the period of today's purchase order (the month the example's calendar made) from
#/periods with a reason; the order's page then shows it read-only (no Save, no Submit, the fields
as text) and says which period and why; a close without a reason is not sent, and a refused
reopen shows the server's problem."""

from __future__ import annotations

import datetime as dt
from typing import Any

from playwright.sync_api import expect

from .conftest import UiServer, shot, signed_in
from .test_access import violations


def test_closing_a_period_makes_its_documents_read_only(ui_server: UiServer, browser: Any) -> None:
    admin = ui_server.token("root", ["admin"])
    today = dt.date.today()
    first = today.replace(day=1)
    last = (first + dt.timedelta(days=32)).replace(day=1) - dt.timedelta(days=1)
    month = today.strftime("%Y-%m")
    _, supplier = ui_server.call(
        "POST", "api/buying/supplier", admin, {"name": "Ledger Ltd", "region": "south"}
    )
    body = {
        "supplier": supplier["data"]["id"],
        "order_date": today.isoformat(),
        "region": "south",
        "lines": [],
    }
    status, order = ui_server.call("POST", "api/buying/purchase_order", admin, body)
    assert status == 201, order
    order_url = f"{ui_server.url}#/a/buying/purchasing/order/{order['data']['id']}"
    # the example's monthly calendar (workspace.yaml) made this month's period at boot
    status, listed = ui_server.call("GET", "api/_periods", admin)
    assert status == 200 and month in [p["name"] for p in listed["data"]], listed
    # a later month closed first: reopening this one is refused by the server, and the page says so
    later = last + dt.timedelta(days=1)
    status, _ = ui_server.call(
        "POST",
        "api/_periods",
        admin,
        {"name": "later", "starts": later.isoformat(), "ends": later.isoformat()},
    )
    assert status == 201

    page = signed_in(browser, ui_server, "root", ["admin"])
    page.goto(order_url)
    form = page.locator("form#form-buying-purchase_order")
    expect(form.get_by_role("button", name="Save")).to_be_visible()  # open: editable
    expect(page.locator(".closed-period")).to_have_count(0)

    page.goto(f"{ui_server.url}#/periods")
    row = page.locator(f"tr[data-period='{month}']")
    expect(row).to_contain_text("Open")
    row.get_by_role("button", name=f"Close {month}").click()
    expect(page.get_by_role("alert")).to_contain_text("Say why")  # no reason: not sent
    page.get_by_label("Reason").fill("books done")
    row.get_by_role("button", name=f"Close {month}").click()
    expect(page.get_by_role("status")).to_contain_text(f"{month}: close done.")
    expect(row).to_contain_text("Closed")
    expect(row).to_contain_text("books done")
    later_row = page.locator("tr[data-period='later']")
    page.get_by_label("Reason").fill("later first")
    later_row.get_by_role("button", name="Close later").click()
    expect(later_row).to_contain_text("Closed")
    page.get_by_label("Reason").fill("a correction")
    row.get_by_role("button", name=f"Reopen {month}").click()
    expect(page.get_by_role("alert")).to_contain_text("SVC.PERIOD.REOPEN_DENIED")
    assert violations(page) == []
    shot(page, "periods-list")

    page.goto(order_url)
    expect(page.locator(".closed-period")).to_contain_text(f"dated in period {month}")
    expect(page.locator(".closed-period")).to_contain_text("books done")
    expect(form.get_by_role("button", name="Save")).to_have_count(0)
    expect(form.get_by_role("button", name="Submit")).to_have_count(0)
    expect(form.locator("input")).to_have_count(0)  # every field shown as text
    shot(page, "periods-closed-order")
    # the server's rule, not the page's: a write of the order is refused
    path = f"api/buying/purchase_order/{order['data']['id']}/submit"
    status, problem = ui_server.call("POST", path, admin, {})
    assert status == 422 and problem["code"] == "SVC.PERIOD.CLOSED", problem
    page.context.close()
