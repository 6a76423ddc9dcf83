"""Live updates over ``/{ws}/_ws``: a list and a record open in the browser change when another
client changes a row (another browser context, and the API), and after the socket drops the page
subscribes again with ``after:`` its last seq and receives what it missed without reloading."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import expect

from .conftest import UiServer, shot, signed_in


def test_list_and_record_follow_other_clients(ui_server: UiServer, browser: Any) -> None:
    admin = ui_server.token("root", ["admin"])
    watcher = signed_in(browser, ui_server, "wanda", ["buying_manager"])
    frames: list[dict[str, Any]] = []
    watcher.on("websocket", lambda ws: ws.on("framesent", lambda f: frames.append(json.loads(f))))
    watcher.goto(f"{ui_server.url}#/a/buying/purchasing/suppliers")
    expect(watcher.get_by_role("heading", name="Suppliers", level=1)).to_be_visible()
    expect(watcher.locator("html[data-live=live]")).to_have_count(1)

    # another browser creates a supplier: the open list shows it without a reload
    editor = signed_in(browser, ui_server, "eve", ["admin"])
    editor.goto(f"{ui_server.url}#/a/buying/purchasing/supplier/new")
    form = editor.locator("form#form-buying-supplier")
    form.get_by_label("Name").fill("Live Parts")
    form.get_by_label("Region").select_option(label="North")
    form.get_by_role("button", name="Create").click()
    expect(editor.get_by_role("heading", name="Supplier: Live Parts")).to_be_visible()
    expect(watcher.get_by_role("cell", name="Live Parts")).to_be_visible()

    # the API renames it while the watcher has its record open (not edited): the form follows
    status, found = ui_server.call("GET", "api/buying/supplier?name=Live%20Parts", admin)
    assert status == 200 and len(found["data"]) == 1, found
    supplier = found["data"][0]
    watcher.goto(f"{ui_server.url}#/a/buying/purchasing/supplier/{supplier['id']}")
    record = watcher.locator("form#form-buying-supplier")
    expect(record.get_by_label("Name")).to_have_value("Live Parts")
    # the rename must come after the record page has subscribed (an earlier one is not its to see)
    for _ in range(100):
        if any(f.get("type") == "subscribe" and f.get("record") == supplier["id"] for f in frames):
            break
        watcher.wait_for_timeout(100)
    watcher.wait_for_timeout(300)  # the server registers the subscription
    status, answer = ui_server.call(
        "PATCH",
        f"api/buying/supplier/{supplier['id']}",
        admin,
        {"name": "Live Parts GmbH"},
        {"If-Match": f'"{supplier["version"]}"'},
    )
    assert status == 200, answer
    expect(record.get_by_label("Name")).to_have_value("Live Parts GmbH", timeout=15_000)

    # an edited form is not overwritten: it says the record changed and offers a reload
    record.get_by_label("Rating").fill("2")
    version = answer["data"]["version"]
    status, answer = ui_server.call(
        "PATCH",
        f"api/buying/supplier/{supplier['id']}",
        admin,
        {"name": "Live Parts AG"},
        {"If-Match": f'"{version}"'},
    )
    assert status == 200, answer
    expect(watcher.get_by_role("status")).to_contain_text(
        "Someone else changed this record since you opened it."
    )
    expect(record.get_by_label("Name")).to_have_value("Live Parts GmbH")
    watcher.get_by_role("status").get_by_role("button", name="Reload").click()
    expect(record.get_by_label("Name")).to_have_value("Live Parts AG")

    # the socket drops; a change made while it is away arrives after the resume (after: seq)
    watcher.goto(f"{ui_server.url}#/a/buying/purchasing/suppliers")
    expect(watcher.get_by_role("cell", name="Live Parts AG")).to_be_visible()
    expect(watcher.locator("html[data-live=live]")).to_have_count(1)
    watcher.evaluate("() => window.dapLive.drop(1500)")
    expect(watcher.locator("html[data-live=offline]")).to_have_count(1)
    status, answer = ui_server.call(
        "POST", "api/buying/supplier", admin, {"name": "Missed Ltd", "region": "south"}
    )
    assert status == 201, answer
    expect(watcher.locator("html[data-live=live]")).to_have_count(1)
    expect(watcher.get_by_role("cell", name="Missed Ltd")).to_be_visible()
    resumed = [f for f in frames if f.get("type") == "subscribe" and "after" in f]
    assert resumed and resumed[-1]["entity"] == "buying/supplier", frames
    shot(watcher, "suppliers-live")
    editor.context.close()
    watcher.context.close()
