"""``chrome.regions``: the procurement example's "Approval desk" app names a Listing in its
``rightbar``; every page of that app shows it beside the content, linking to the records."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from playwright.sync_api import expect

from .conftest import UiServer, shot, signed_in
from .test_access import violations


def test_rightbar_lists_recent_orders(ui_server: UiServer, browser: Any) -> None:
    admin = ui_server.token("root", ["admin"])
    status, supplier = ui_server.call(
        "POST", "api/buying/supplier", admin, {"name": "Region Co", "region": "north"}
    )
    assert status == 201, supplier
    body = {
        "supplier": supplier["data"]["id"],
        "order_date": date.today().isoformat(),
        "region": "north",
        "lines": [],
    }
    status, order = ui_server.call("POST", "api/buying/purchase_order", admin, body)
    assert status == 201, order
    page = signed_in(browser, ui_server, "root", ["admin"])
    page.goto(f"{ui_server.url}#/a/buying/review/approvals_page")
    expect(page.get_by_role("heading", name="Approvals", level=1)).to_be_visible()
    aside = page.get_by_role("complementary", name="Recent orders")
    link = aside.get_by_role("link", name=order["data"]["number"])
    expect(link).to_be_visible()
    expect(aside).to_contain_text("Region Co")
    main, side = page.locator("main").bounding_box(), aside.bounding_box()
    assert (
        main is not None and side is not None and side["x"] >= main["x"] + main["width"] - 1
    )  # beside, right
    assert violations(page) == []
    shot(page, "desk-rightbar")
    link.click()
    expect(
        page.get_by_role("heading", name=re.compile(f"Purchase order: {order['data']['number']}"))
    ).to_be_visible()
    expect(
        page.get_by_role("complementary", name="Recent orders")
    ).to_be_visible()  # on every page of the app
    page.context.close()
