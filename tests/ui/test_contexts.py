"""Page contexts in the browser (issue 28): the lending spec's Member card page (tests/ui/specs/
lending/ui.yaml) declares a realtime context on the route's member, the same record without
realtime, the session's username, a realtime list of members and expressions over them; a block
shows them through ``{context.…}`` templates.

Another client (the REST API) renames the member: the realtime context changes on the open page
without a reload, the other keeps what it read until the page is loaded again; a new member
changes the realtime list's count. A caller without ``lending.member.read`` sees the fallbacks and
nothing of the record, in the page or over the socket.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import UiServer, serving, shot, signed_in
from .test_access import violations
from .test_desk import LENDING


@pytest.fixture(scope="module")
def lending(pg_server_dsn: str) -> Iterator[UiServer]:
    with serving(pg_server_dsn, LENDING, "contexts-server.log") as server:
        yield server


def field(page: Any, label: str) -> Any:
    """The value of ``label`` in the page's summary block."""
    return page.locator(".summary dl > div").filter(has=page.locator(f"dt:text-is('{label}')")).locator("dd")


def subscribed(page: Any, frames: list[dict[str, Any]], **match: Any) -> None:
    """Wait until the page has sent a subscribe frame matching ``match`` (and the server took it)."""
    for _ in range(100):
        if any(f.get("type") == "subscribe" and all(f.get(k) == v for k, v in match.items()) for f in frames):
            page.wait_for_timeout(300)  # the server registers the subscription
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"no subscribe frame {match} in {frames}")


def test_realtime_contexts_follow_other_clients(lending: UiServer, browser: Any) -> None:
    admin = lending.token("root", ["admin"])
    status, made = lending.call(
        "POST",
        "api/lending/member",
        admin,
        {"card": "C-1", "full_name": "Ada Context", "email": "ada@example.org"},
    )
    assert status == 201, made
    member = made["data"]
    for isbn, title, borrower in (("C-B1", "Borrowed Here", member["id"]), ("C-B2", "On The Shelf", None)):
        book = {"isbn": isbn, "headline": title, "author": "A", "borrower": borrower}
        assert lending.call("POST", "api/lending/book", admin, book)[0] == 201
    _, listed = lending.call("GET", "api/lending/member?count=true&limit=1", admin)
    count = listed["total"]

    page = signed_in(browser, lending, "lib", ["librarian"])
    frames: list[dict[str, Any]] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda f: frames.append(json.loads(f))))
    page.goto(f"{lending.url}#/a/lending/desk/card/{member['id']}")
    summary = page.get_by_role("region", name="Ada Context")
    expect(summary.get_by_role("heading", name="Ada Context", level=2)).to_be_visible()
    expect(summary).to_contain_text("Hello lib, this is card C-1")  # session and expr contexts
    expect(field(page, "Card")).to_have_text("C-1")
    expect(field(page, "Email")).to_have_text("ada@example.org")
    expect(field(page, "Name when the page opened")).to_have_text("Ada Context")
    expect(field(page, "Members of the library")).to_have_text(str(count))
    expect(page.locator(".context-problems")).to_have_count(0)  # no context failed
    books = page.get_by_role("table", name="Books")  # param: {borrower: "{context.member.id}"}
    expect(books.get_by_role("link", name="Borrowed Here")).to_be_visible()
    expect(books.get_by_role("row")).to_have_count(2)  # the header and the member's one book
    assert violations(page) == []
    shot(page, "contexts-card")

    # another client renames the member over REST: the realtime context follows, no reload
    subscribed(page, frames, entity="lending/member", record=member["id"])
    subscribed(page, frames, entity="lending/member")  # the list's subscription (no record)
    page.evaluate("() => { window.__same = true }")  # gone if the page reloads
    status, changed = lending.call(
        "PATCH",
        f"api/lending/member/{member['id']}",
        admin,
        {"full_name": "Ada King", "email": "king@example.org"},
        {"If-Match": f'"{member["version"]}"'},
    )
    assert status == 200, changed
    expect(page.get_by_role("heading", name="Ada King", level=2)).to_be_visible(timeout=15_000)
    expect(field(page, "Email")).to_have_text("king@example.org")
    # the context without realtime keeps what it read when the page opened
    expect(field(page, "Name when the page opened")).to_have_text("Ada Context")
    page.wait_for_timeout(500)
    expect(field(page, "Name when the page opened")).to_have_text("Ada Context")

    # a new member: the realtime list (and the count over it) follows too
    status, other = lending.call(
        "POST", "api/lending/member", admin, {"card": "C-2", "full_name": "Grace Hopper"}
    )
    assert status == 201, other
    expect(field(page, "Members of the library")).to_have_text(str(count + 1), timeout=15_000)
    assert page.evaluate("() => window.__same === true"), "the page reloaded"

    # loaded again, the page reads the record as it is now
    page.reload()
    expect(field(page, "Name when the page opened")).to_have_text("Ada King")
    expect(page.get_by_role("heading", name="Ada King", level=2)).to_be_visible()
    page.context.close()


def test_contexts_without_read_permission_get_the_fallback(lending: UiServer, browser: Any) -> None:
    admin = lending.token("root", ["admin"])
    status, made = lending.call(
        "POST",
        "api/lending/member",
        admin,
        {"card": "S-1", "full_name": "Secret Person", "email": "s@example.org"},
    )
    assert status == 201, made
    member = made["data"]

    page = signed_in(browser, lending, "vic", ["visitor"])  # no lending.member.read
    frames: list[dict[str, Any]] = []
    received: list[str] = []
    page.on(
        "websocket",
        lambda ws: (
            ws.on("framesent", lambda f: frames.append(json.loads(f))),
            ws.on("framereceived", lambda f: received.append(str(f))),
        ),
    )
    page.goto(f"{lending.url}#/a/lending/desk/card/{member['id']}")
    expect(page.get_by_role("heading", name="A member you may not see", level=2)).to_be_visible()
    expect(field(page, "Card")).to_have_text("-")
    expect(field(page, "Email")).to_have_text("")
    expect(field(page, "Name when the page opened")).to_have_text("-")
    expect(field(page, "Members of the library")).to_have_text("0")
    expect(page.locator(".context-problems")).to_have_count(0)  # every failing context had a fallback
    # the books table's param names the member's id, which the fallback lacks: not every book
    expect(page.get_by_role("region", name="Books")).to_contain_text("Nothing to list here.")
    # the socket refuses the subscriptions; a change to the record sends the visitor nothing
    subscribed(page, frames, entity="lending/member", record=member["id"])
    status, changed = lending.call(
        "PATCH",
        f"api/lending/member/{member['id']}",
        admin,
        {"full_name": "Secret Renamed"},
        {"If-Match": f'"{member["version"]}"'},
    )
    assert status == 200, changed
    page.wait_for_timeout(1500)
    text = page.locator("main").inner_text()
    assert not re.search(r"Secret|S-1|s@example\.org", text), text
    assert not any("Secret" in f or "S-1" in f for f in received), received
    assert any('"type": "error"' in f or '"type":"error"' in f for f in received), received
    expect(page.get_by_role("heading", name="A member you may not see", level=2)).to_be_visible()
    page.context.close()
