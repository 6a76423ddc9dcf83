"""Accessibility and small screens: axe-core (injected from ui/node_modules) finds no serious or
critical violation on the main pages in both themes, and the pages work at a phone's width."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import ROOT, UiServer, shot

AXE = ROOT / "ui" / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def order(ui_server: UiServer) -> dict[str, Any]:
    admin = ui_server.token("root", ["admin"])
    _, supplier = ui_server.call("POST", "api/buying/supplier", admin, {"name": "Axe Ltd", "region": "south"})
    _, item = ui_server.call(
        "POST", "api/stock/item", admin, {"code": "AX-1", "title": "Axe", "unit_price": "9.90"}
    )
    body = {
        "supplier": supplier["data"]["id"],
        "order_date": date.today().isoformat(),
        "region": "south",
        "lines": [{"item": item["data"]["id"], "qty": "1"}],
    }
    status, answer = ui_server.call("POST", "api/buying/purchase_order", admin, body)
    assert status == 201, answer
    return dict(answer["data"])


def violations(page: Any) -> list[str]:
    if not AXE.is_file():
        pytest.skip("axe-core is not installed: run `make ui` (npm ci in ui/)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


def signed_in(browser: Any, ui_server: UiServer, viewport: dict[str, int], theme: str = "light") -> Any:
    context = browser.new_context(viewport=viewport)
    token = ui_server.token("root", ["admin"])
    context.add_init_script(f"sessionStorage.setItem('dap.token.default', {token!r})")
    context.add_init_script(f"localStorage.setItem('dap.theme', {theme!r})")
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation(
    ui_server: UiServer, browser: Any, order: dict[str, Any], theme: str
) -> None:
    found: dict[str, list[str]] = {}
    page = browser.new_page()
    page.add_init_script(f"localStorage.setItem('dap.theme', {theme!r})")
    for route, heading in (("#/login", "Sign in"), ("#/setup", "Set up")):
        page.goto(ui_server.url + route)
        expect(page.get_by_role("heading", name=re.compile(heading))).to_be_visible()
        found[route] = violations(page)
    page.close()
    page = signed_in(browser, ui_server, {"width": 1280, "height": 900}, theme)
    pages = {
        "#/a/buying/purchasing/orders": "Purchase orders",
        f"#/a/buying/purchasing/order/{order['id']}": "Purchase order",
        "#/a/buying/purchasing/order/new": "Purchase order",
        "#/a/buying/purchasing/suppliers": "Suppliers",
        "#/a/buying/purchasing/board": "Order board",
        "#/a/buying/purchasing/overview": "Overview",
    }
    for route, heading in pages.items():
        page.goto(ui_server.url + route)
        expect(page.get_by_role("heading", name=heading, level=1)).to_be_visible()
        expect(page.locator("[aria-busy=true]")).to_have_count(0)
        if route.endswith("/orders"):
            page.get_by_role("button", name=order["number"]).click()
            expect(page.get_by_role("region", name="Purchase order", exact=True)).to_contain_text("Axe Ltd")
        found[route] = violations(page)
    shot(page, f"suppliers-{theme}")
    page.context.close()
    assert not any(found.values()), found


def test_keyboard_reaches_the_form(ui_server: UiServer, browser: Any, order: dict[str, Any]) -> None:
    page = signed_in(browser, ui_server, {"width": 1280, "height": 900})
    page.goto(ui_server.url + "#/a/buying/purchasing/orders")
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    row = page.get_by_role("button", name=order["number"])
    row.focus()
    page.keyboard.press("Enter")  # a keyboard selection drives the bound detail block
    expect(page.get_by_role("region", name="Purchase order", exact=True)).to_contain_text("Axe Ltd")
    page.context.close()


def test_phone_viewport(ui_server: UiServer, browser: Any, order: dict[str, Any]) -> None:
    page = signed_in(browser, ui_server, PHONE)
    page.goto(ui_server.url + "#/a/buying/purchasing/orders")
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()
    nav = page.get_by_role("navigation", name="Pages")
    expect(nav).to_be_hidden()  # behind the menu button on a phone
    page.get_by_role("button", name="Menu").click()
    expect(nav).to_be_visible()
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width}px wide"
    page.get_by_role("button", name=order["number"]).click()
    detail = page.get_by_role("region", name="Purchase order", exact=True)
    expect(detail).to_contain_text("Axe Ltd")
    box = detail.bounding_box()
    assert box is not None and box["width"] <= PHONE["width"]  # the split stacks
    shot(page, "orders-phone")
    page.goto(ui_server.url + f"#/a/buying/purchasing/order/{order['id']}")
    expect(page.get_by_role("button", name="Submit")).to_be_visible()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    shot(page, "order-phone")
    for route, heading in (
        ("board", "Order board"),
        ("overview", "Overview"),
        ("approvals_page", "Approvals"),
    ):
        page.goto(ui_server.url + f"#/a/buying/purchasing/{route}")
        expect(page.get_by_role("heading", name=heading, level=1)).to_be_visible()
        expect(page.locator("[aria-busy=true]")).to_have_count(0)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"], route
        shot(page, f"{route}-phone")
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_approvals_are_accessible(
    ui_server: UiServer, browser: Any, order: dict[str, Any], theme: str
) -> None:
    """The inbox, a record's approval panel and the reject dialog: axe finds nothing serious, and a
    committee member approves with the keyboard alone."""
    admin = ui_server.token("root", ["admin"])
    body = {
        "supplier": order["supplier"],
        "order_date": date.today().isoformat(),
        "region": "south",
        "lines": [],
    }
    status, answer = ui_server.call("POST", "api/buying/purchase_order", admin, body)
    assert status == 201, answer
    path = f"api/buying/purchase_order/{answer['data']['id']}"
    assert ui_server.call("POST", f"{path}/request_approval", admin, {})[0] == 200
    assert ui_server.call("POST", f"{path}/approve", admin, {})[0] == 202
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    token = ui_server.token(f"ada-{theme}", ["purchase_committee"])
    context.add_init_script(f"sessionStorage.setItem('dap.token.default', {token!r})")
    context.add_init_script(f"localStorage.setItem('dap.theme', {theme!r})")
    page = context.new_page()
    page.set_default_timeout(10_000)
    found: dict[str, list[str]] = {}
    page.goto(f"{ui_server.url}#/a/buying/purchasing/order/{answer['data']['id']}")
    expect(page.get_by_role("region", name="Approval: pending")).to_contain_text("0 of 2 votes")
    found["record"] = violations(page)
    page.goto(f"{ui_server.url}#/a/buying/purchasing/approvals_page")
    row = page.get_by_role("row").filter(has_text="Axe Ltd").first
    expect(row).to_be_visible()
    found["inbox"] = violations(page)
    row.get_by_role("button", name=re.compile("^Reject")).click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Why? (required)")).to_be_focused()
    dialog.get_by_role("button", name="Reject").click()
    expect(dialog.get_by_text("A comment is required to reject.")).to_be_visible()
    found["reject dialog"] = violations(page)
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    page.set_viewport_size(PHONE)  # the inbox on a phone: rows become cards, nothing scrolls sideways
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the inbox scrolls sideways on a phone: {width}px wide"
    shot(page, f"approvals-phone-{theme}")
    page.set_viewport_size({"width": 1280, "height": 900})
    # keyboard only: focus the row's Approve button and press Enter
    approve = row.get_by_role("button", name=re.compile("^Approve"))
    approve.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Vote counted:")  # the light run voted on one too
    context.close()
    assert not any(found.values()), found
