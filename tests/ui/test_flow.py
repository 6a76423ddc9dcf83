"""The procurement flow end to end in Chromium: first admin, login, a supplier (a server problem on
its field first) and an item, an order with lines and its computed total, submit, and the audit
trail; the split list page follows the selection; then the approval: the order sent for approval
(202, "Sent for approval."), two purchase committee members approve in their inbox, a buying
manager on the record, and the order is approved with the votes on its trail. The approvers sign in
with tokens signed by the test (it holds the server's JWT secret) put in the browser's
sessionStorage, where the UI keeps its token: the API has no endpoint to create users with roles."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from playwright.sync_api import expect

from .conftest import UiServer, shot, signed_in


def test_procurement_flow(ui_server: UiServer, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # no token: the login page; from there the first-admin setup with the one-time code
    page.goto(ui_server.url)
    expect(page.get_by_role("heading", name=re.compile("Sign in"))).to_be_visible()
    page.get_by_role("link", name="Set up the first admin").click()
    page.get_by_label("Setup code").fill("wrong-code")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password (8 characters or more)").fill("correct horse")
    page.get_by_role("button", name="Create admin").click()
    expect(page.get_by_role("alert")).to_contain_text("setup code is wrong")
    page.get_by_label("Setup code").fill(ui_server.setup_code())
    page.get_by_role("button", name="Create admin").click()
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()

    # sign out and in again with the password
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong password")
    page.get_by_label("Password").fill("correct horse")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()
    shot(page, "orders-empty")

    # a supplier, with a server problem shown on its field first (rating must be 1..5)
    nav = page.get_by_role("navigation", name="Pages")
    nav.get_by_role("link", name="Suppliers").click()
    page.get_by_role("link", name="New supplier").click()
    supplier = page.locator("form#form-buying-supplier")
    supplier.get_by_label("Name").fill("ACME Bolts")
    supplier.get_by_label("Region").select_option(label="North")
    supplier.get_by_label("Rating").fill("7")
    supplier.get_by_role("button", name="Create").click()
    rating = supplier.get_by_label("Rating")
    expect(rating).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#form-buying-supplier-rating-error")).to_be_visible()
    rating.fill("4")
    supplier.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Supplier: ACME Bolts")).to_be_visible()
    nav.get_by_role("link", name="Suppliers").click()
    expect(page.get_by_role("cell", name="ACME Bolts")).to_be_visible()
    shot(page, "suppliers")

    # an item (another module's entity, in the same app)
    nav.get_by_role("link", name="Items").click()
    page.get_by_role("link", name="New item").click()
    item = page.locator("form#form-stock-item")
    item.get_by_label("Code").fill("B-1")
    item.get_by_label("Title").fill("Bolt")
    item.get_by_label("Unit price").fill("2.50")
    expect(item.get_by_label("Unit of measure")).to_have_value("piece")  # the field's default
    item.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Item: Bolt")).to_be_visible()

    # a new order with two lines; the total is computed live and then by the server
    nav.get_by_role("link", name="Purchase orders").click()
    page.get_by_role("link", name="New purchase order").click()
    form = page.locator("form#form-buying-purchase_order")
    form.get_by_label("Supplier", exact=True).fill("ACME")
    form.get_by_role("option", name="ACME Bolts").click()
    form.get_by_label("Order date").fill(date.today().isoformat())
    form.get_by_label("Region").fill("north")
    form.get_by_role("button", name="Add row to Lines").click()
    form.get_by_label("Item, row 1", exact=True).fill("bol")
    form.get_by_role("option", name="Bolt").click()
    expect(form.get_by_label("Unit price, row 1")).to_have_value("2.50")  # auto_fill, as the server does
    form.get_by_label("Qty, row 1").fill("4")
    form.get_by_role("button", name="Add row to Lines").click()
    form.get_by_label("Item, row 2", exact=True).fill("bol")
    form.get_by_role("option", name="Bolt").click()
    form.get_by_label("Qty, row 2").fill("2")
    expect(form.get_by_label("Total")).to_have_value("15.00")  # computed in the browser
    # visible_when "total > 1000", evaluated live by the TypeScript port of the expression language
    expect(form.get_by_label("Notes")).to_have_count(0)
    form.get_by_label("Qty, row 1").fill("400")
    expect(form.get_by_label("Total")).to_have_value("1005.00")
    expect(form.get_by_label("Notes")).to_be_visible()
    form.get_by_label("Qty, row 1").fill("4")
    expect(form.get_by_label("Notes")).to_have_count(0)
    # rows reorder and renumber
    form.get_by_role("button", name="Move row 2 up").click()
    expect(form.get_by_label("Qty, row 1")).to_have_value("2")
    form.get_by_role("button", name="Move row 1 down").click()
    expect(form.get_by_label("Qty, row 1")).to_have_value("4")
    shot(page, "order-new")
    form.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name=re.compile(r"Purchase order: PO-\d{4}-00001"))).to_be_visible()
    expect(form.get_by_label("Total")).to_have_value("15.00")  # the server's answer
    expect(form.get_by_label("Amount, row 1")).to_have_value("10.00")

    # submit (a lifecycle move); the Save button goes, Cancel comes; the trail shows the move
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_role("status")).to_contain_text("Submit: done")
    expect(page.locator(".badge.submitted")).to_have_text("Submitted")
    expect(page.get_by_role("button", name="Save")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    expect(page.locator("[data-field=total]")).to_have_text("€15.00")
    trail = page.get_by_role("region", name="History")
    expect(trail).to_contain_text("submit by root")
    expect(trail).to_contain_text('docstatus: "draft" → "submitted"')
    shot(page, "order-submitted")

    # the list shows it; the split page's detail follows the selection (binds)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Purchase orders").click()
    page.get_by_role("button", name=re.compile(r"PO-\d{4}-00001")).click()
    detail = page.get_by_role("region", name="Purchase order", exact=True)
    expect(detail.locator("[data-field=total]")).to_have_text("€15.00")
    shot(page, "orders-split")

    # request approval (a plain transition), then the gated one: 202, an approval opens
    detail.get_by_role("link", name="Open").click()
    page.get_by_role("button", name="Request approval").click()
    expect(page.get_by_role("status")).to_contain_text("Request approval: done")
    expect(page.locator(".badges")).to_contain_text("Pending approval")
    page.get_by_role("button", name="Send for approval").click()
    expect(page.get_by_role("status")).to_contain_text("Sent for approval.")
    panel = page.get_by_role("region", name=re.compile("Approval"))
    expect(panel).to_contain_text("Approval: pending")
    expect(panel).to_contain_text("Purchase committee: 0 of 2 votes")
    expect(panel.get_by_role("button", name="Approve")).to_have_count(0)  # the requester may not vote
    expect(page.get_by_role("button", name="Send for approval")).to_have_count(0)  # 409 while pending
    order_url = page.url
    number = page.get_by_role("heading", name=re.compile(r"Purchase order: PO-")).inner_text().split(": ")[1]

    # two committee members approve from their inbox; a buyer finds nothing to approve
    buyer = signed_in(browser, ui_server, "bea", ["buyer"])
    buyer.goto(f"{ui_server.url}#/a/buying/purchasing/approvals_page")
    expect(buyer.get_by_role("heading", name="Waiting for my approval")).to_be_visible()
    expect(buyer.get_by_text("Nothing waits for your approval.")).to_be_visible()
    buyer.context.close()
    for n, voter in enumerate(["carl", "cleo"], start=1):
        inbox = signed_in(browser, ui_server, voter, ["purchase_committee"])
        inbox.on("pageerror", lambda e: errors.append(str(e)))
        inbox.goto(f"{ui_server.url}#/a/buying/purchasing/approvals_page")
        row = inbox.get_by_role("row").filter(has_text="ACME Bolts")
        expect(row).to_contain_text("€15.00")
        expect(row).to_contain_text(f"Purchase committee ({n - 1} of 2)")
        if n == 1:
            shot(inbox, "approvals-inbox")
        row.get_by_role("button", name="Approve").click()
        expected = (
            "Vote counted: Purchase committee 1 of 2." if n == 1 else "Vote counted: Manager sign-off 0 of 1."
        )
        expect(inbox.get_by_role("status")).to_contain_text(expected)
        expect(inbox.get_by_text("Nothing waits for your approval.")).to_be_visible()
        inbox.context.close()

    # the buying manager approves on the record itself; the order moves to approved
    manager = signed_in(browser, ui_server, "mia", ["buying_manager"])
    manager.on("pageerror", lambda e: errors.append(str(e)))
    manager.goto(order_url)
    panel = manager.get_by_role("region", name=re.compile("Approval"))
    expect(panel).to_contain_text("Manager sign-off: 0 of 1 votes")
    expect(panel).to_contain_text("vote (committee) by carl")
    shot(manager, "order-approval")
    panel.get_by_role("button", name=f"Approve {number}").click()
    expect(manager.get_by_role("status")).to_contain_text("Approved: the record moved to approved.")
    expect(manager.locator(".badges")).to_contain_text("Approved")
    expect(panel).to_contain_text("Approval: approved")
    manager.context.close()

    # the requester's open page follows over the websocket: approved, votes on the trail
    expect(page.locator(".badges")).to_contain_text("Approved")
    trail = page.get_by_role("region", name="History")
    expect(trail).to_contain_text("approval.approved-vote by carl")
    expect(trail).to_contain_text("approve by mia")
    shot(page, "order-approved")

    # the form's confirm text guards Cancel: Back changes nothing, Confirm cancels
    page.get_by_role("button", name="Cancel").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel this order?")
    dialog.get_by_role("button", name="Back").click()
    expect(dialog).to_have_count(0)
    expect(page.locator(".badge.submitted")).to_have_text("Submitted")
    page.get_by_role("button", name="Cancel").click()
    page.get_by_role("dialog").get_by_role("button", name="Confirm").click()
    expect(page.locator(".badge.cancelled")).to_have_text("Cancelled")
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(page.get_by_role("region", name="History")).to_contain_text("cancel by root")
    assert errors == []


def test_reject_needs_a_comment(ui_server: UiServer, browser: Any) -> None:
    """Reject in the inbox asks for a comment (the dialog refuses an empty one) and moves the order
    to ``rejected`` (the gate's ``on_reject``)."""
    admin = ui_server.token("rex", ["admin"])
    status, supplier = ui_server.call(
        "POST", "api/buying/supplier", admin, {"name": "Nope Ltd", "region": "south"}
    )
    assert status == 201, supplier
    body = {
        "supplier": supplier["data"]["id"],
        "order_date": date.today().isoformat(),
        "region": "south",
        "lines": [],
    }
    status, order = ui_server.call("POST", "api/buying/purchase_order", admin, body)
    assert status == 201, order
    path = f"api/buying/purchase_order/{order['data']['id']}"
    assert ui_server.call("POST", f"{path}/request_approval", admin, {})[0] == 200
    assert ui_server.call("POST", f"{path}/approve", admin, {})[0] == 202
    page = signed_in(browser, ui_server, "cora", ["purchase_committee"])
    page.goto(f"{ui_server.url}#/a/buying/purchasing/approvals_page")
    row = page.get_by_role("row").filter(has_text="Nope Ltd")
    row.get_by_role("button", name="Reject").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Reject").click()
    expect(dialog.get_by_text("A comment is required to reject.")).to_be_visible()
    expect(dialog.get_by_label("Why? (required)")).to_have_attribute("aria-invalid", "true")
    dialog.get_by_label("Why? (required)").fill("No budget this quarter")
    dialog.get_by_role("button", name="Reject").click()
    expect(page.get_by_role("status")).to_contain_text("Rejected.")
    status, answer = ui_server.call("GET", path, admin)
    assert status == 200 and answer["data"]["state"] == "rejected", answer
    page.context.close()
