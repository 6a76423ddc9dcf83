"""The desk's everyday parts (issue 29) on a spec other than the example: a small lending
library (tests/ui/specs/lending) served by ``dap serve`` with the built bundle, in Chromium.

Records are titled by a human field (the relation's ``display_field``, else the first required
string that is not a natural key) in the heading, the breadcrumb and the tab; the breadcrumb's
entity crumb opens the list; state badges say "Checked in" like the list; a member's page lists
the books that point at it; a save at an old version says someone else changed the record and
offers Reload; the bundle's assets are gzip-compressed, cached as immutable, the index revalidated.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import UiServer, serving, shot, signed_in
from .test_access import violations

LENDING = Path(__file__).parent / "specs" / "lending"
PHONE = {"width": 390, "height": 844}
WIDER_THAN_SCREEN = """() => [...document.querySelectorAll('body *')]
  .filter((e) => e.getBoundingClientRect().right > innerWidth + 1)
  .slice(0, 5)
  .map((e) => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""


@pytest.fixture(scope="module")
def lending(pg_server_dsn: str) -> Iterator[UiServer]:
    with serving(pg_server_dsn, LENDING, "lending-server.log") as server:
        yield server


@pytest.fixture(scope="module")
def shelf(lending: UiServer) -> dict[str, Any]:
    admin = lending.token("root", ["admin"])
    status, member = lending.call(
        "POST", "api/lending/member", admin, {"card": "M-1", "full_name": "Ada Lovelace"}
    )
    assert status == 201, member
    body = {"isbn": "978-0-00-000001", "headline": "Notes on the Engine", "author": "L. Menabrea"}
    status, book = lending.call("POST", "api/lending/book", admin, {**body, "borrower": member["data"]["id"]})
    assert status == 201, book
    return {"member": member["data"], "book": book["data"]}


def test_records_are_titled_and_crumbs_open_lists(
    lending: UiServer, browser: Any, shelf: dict[str, Any]
) -> None:
    page = signed_in(browser, lending, "root", ["admin"])
    page.goto(f"{lending.url}#/a/lending/desk/books")
    table = page.get_by_role("table", name="Books")
    row = table.get_by_role("row", name=re.compile("Notes on the Engine"))
    expect(row.get_by_role("cell", name="Checked in")).to_be_visible()  # the state, labelled
    expect(row.get_by_role("cell", name="Ada Lovelace")).to_be_visible()  # the relation's label
    row.get_by_role("link", name="Notes on the Engine").click()

    # the record is titled by its title field, not its id or ISBN: heading, breadcrumb, tab
    expect(page.get_by_role("heading", name="Book: Notes on the Engine")).to_be_visible()
    crumbs = page.get_by_role("navigation", name="Breadcrumbs")
    expect(crumbs.get_by_role("listitem").last).to_have_text("Notes on the Engine")
    expect(page).to_have_title(re.compile(r"^Notes on the Engine · Book"))
    assert shelf["book"]["id"] not in (crumbs.inner_text() + page.title())
    expect(page.locator(".badges")).to_have_text("Checked in")  # like the list says it
    assert violations(page) == []
    shot(page, "desk-book")

    # a transition changes the badge with the list's label
    page.get_by_role("button", name="Check out").click()
    expect(page.locator(".badges")).to_have_text("Checked out")

    # the entity crumb opens the list, not a blank "New" form
    crumbs.get_by_role("link", name="Books").click()
    expect(page.get_by_role("heading", name="Books", level=1)).to_be_visible()
    expect(page.get_by_role("table", name="Books").get_by_role("cell", name="Checked out")).to_be_visible()
    expect(page.get_by_role("button", name="Create")).to_have_count(0)
    page.context.close()


def test_member_page_lists_its_books(lending: UiServer, browser: Any, shelf: dict[str, Any]) -> None:
    member = shelf["member"]
    page = signed_in(browser, lending, "root", ["admin"])
    page.goto(f"{lending.url}#/a/lending/desk/member/{member['id']}")
    # titled by the display_field the book's relation names (full_name), not the card number
    expect(page.get_by_role("heading", name="Member: Ada Lovelace")).to_be_visible()
    books = page.get_by_role("region", name=re.compile(r"^Book \(1\)"))
    link = books.get_by_role("link", name="Notes on the Engine")
    expect(link).to_be_visible()
    assert violations(page) == []
    link.click()
    expect(page.get_by_role("heading", name="Book: Notes on the Engine")).to_be_visible()
    page.context.close()


def test_phone_width_record_page(lending: UiServer, browser: Any, shelf: dict[str, Any]) -> None:
    page = signed_in(browser, lending, "root", ["admin"], viewport=PHONE)
    page.goto(f"{lending.url}#/a/lending/desk/book/{shelf['book']['id']}")
    expect(page.get_by_role("heading", name="Book: Notes on the Engine")).to_be_visible()
    expect(page.get_by_role("navigation", name="Breadcrumbs")).to_be_visible()
    width = page.evaluate("() => document.documentElement.scrollWidth")
    wide = page.evaluate(WIDER_THAN_SCREEN)
    assert width <= PHONE["width"], f"scrolls sideways: {width}px, {wide}"
    assert violations(page) == []
    shot(page, "desk-book-phone")
    page.context.close()


def test_stale_save_is_explained_with_reload(lending: UiServer, browser: Any) -> None:
    admin = lending.token("root", ["admin"])
    status, member = lending.call("POST", "api/lending/member", admin, {"card": "M-2", "full_name": "Grace"})
    assert status == 201, member
    record = member["data"]
    page = signed_in(browser, lending, "root", ["admin"])
    page.goto(f"{lending.url}#/a/lending/desk/member/{record['id']}")
    form = page.locator("form#form-lending-member")
    expect(form.get_by_label("Full name")).to_have_value("Grace")
    expect(page.locator("html[data-live=live]")).to_have_count(1)
    # the live update is missed (the socket is away), so only the save's 412 can tell
    page.evaluate("() => window.dapLive.drop(60000)")
    expect(page.locator("html[data-live=offline]")).to_have_count(1)
    status, answer = lending.call(
        "PATCH",
        f"api/lending/member/{record['id']}",
        admin,
        {"email": "grace@example.org"},
        {"If-Match": f'"{record["version"]}"'},
    )
    assert status == 200, answer
    form.get_by_label("Full name").fill("Grace Hopper")
    form.get_by_role("button", name="Save").click()
    status_region = page.get_by_role("status")
    expect(status_region).to_contain_text("Someone else changed this record since you opened it.")
    expect(page.get_by_role("alert")).to_have_count(0)  # not a raw "is at version 2, not 1"
    expect(page.locator(".toast.error")).to_contain_text("Not saved: someone else changed this record.")
    assert violations(page) == []
    status_region.get_by_role("button", name="Reload").click()
    expect(form.get_by_label("Email")).to_have_value("grace@example.org")
    form.get_by_label("Full name").fill("Grace Hopper")
    form.get_by_role("button", name="Save").click()
    expect(status_region).to_contain_text("Saved.")
    _, now = lending.call("GET", f"api/lending/member/{record['id']}", admin)
    assert now["data"]["full_name"] == "Grace Hopper" and now["data"]["email"] == "grace@example.org"
    page.context.close()


def _get(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_assets_are_compressed_and_cached(lending: UiServer) -> None:
    status, headers, body = _get(lending.url, {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Cache-Control"] == "no-cache" and headers["Content-Encoding"] == "gzip"
    index = gzip.decompress(body).decode()
    script = re.search(r'src="(/assets/index-[^"]+\.js)"', index)
    assert script is not None, index
    status, headers, _ = _get(lending.url, {"If-None-Match": headers["ETag"]})
    assert status == 304  # a warm load revalidates the index for nothing

    url = lending.api + script.group(1)
    status, headers, packed = _get(url, {"Accept-Encoding": "gzip, br"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert "Accept-Encoding" in headers["Vary"]
    status, headers, plain = _get(url, {"Accept-Encoding": "identity"})
    assert status == 200 and "Content-Encoding" not in headers
    assert gzip.decompress(packed) == plain and len(packed) < len(plain) / 2
    assert headers["Content-Type"].startswith(("text/javascript", "application/javascript"))
    for bad in ("/assets/..%2Findex.html", "/assets/nothing-here.js"):
        assert _get(lending.api + bad, {})[0] == 404


def test_notifications_with_unread_count(lending: UiServer, browser: Any) -> None:
    admin = lending.token("root", ["admin"])
    librarian = lending.token("librarian", ["librarian"])
    body = {"isbn": "978-0-00-000002", "headline": "Sketch of the Analytical Engine"}
    status, book = lending.call("POST", "api/lending/book", admin, body)
    assert status == 201, book
    status, _ = lending.call("POST", f"api/lending/book/{book['data']['id']}/lend", admin)
    assert status == 200
    unread: list[dict[str, Any]] = []
    for _ in range(100):  # the notification channel delivers after the commit
        _, found = lending.call("GET", "api/_notifications", librarian)
        unread = found["data"]
        if any(n["record_id"] == book["data"]["id"] for n in unread):
            break
        time.sleep(0.1)
    subject = "Checked out: Sketch of the Analytical Engine"
    assert any(n["subject"] == subject for n in unread), unread

    page = signed_in(browser, lending, "librarian", ["librarian"], viewport=PHONE)
    page.goto(f"{lending.url}#/a/lending/desk/books")
    bell = page.get_by_role("button", name=f"Notifications, {len(unread)} unread")
    bell.click()
    panel = page.get_by_role("region", name="Notifications")
    expect(panel.get_by_role("listitem")).to_have_count(len(unread))
    assert violations(page) == []
    shot(page, "desk-notifications-phone")
    panel.get_by_role("link", name=subject).click()
    expect(page.get_by_role("heading", name="Book: Sketch of the Analytical Engine")).to_be_visible()
    after = len(unread) - 1
    name = f"Notifications, {after} unread" if after else "Notifications"
    expect(page.get_by_role("button", name=name, exact=True)).to_be_visible()
    _, found = lending.call("GET", "api/_notifications", librarian)
    assert all(n["record_id"] != book["data"]["id"] for n in found["data"])
    page.context.close()


def test_relation_combobox_searches_as_you_type(
    lending: UiServer, browser: Any, shelf: dict[str, Any]
) -> None:
    admin = lending.token("root", ["admin"])
    for card, name in (("M-10", "Alan Turing"), ("M-11", "Alonzo Church")):
        status, _ = lending.call("POST", "api/lending/member", admin, {"card": card, "full_name": name})
        assert status == 201
    page = signed_in(browser, lending, "root", ["admin"])
    page.goto(f"{lending.url}#/a/lending/desk/book/new")
    form = page.locator("form#form-lending-book")
    form.get_by_label("Isbn").fill("978-0-00-000003")
    form.get_by_label("Title").fill("On Computable Numbers")
    borrower = form.get_by_role("combobox", name="Borrower")
    borrower.fill("Al")
    listbox = page.get_by_role("listbox", name="Borrower options")
    expect(listbox.get_by_role("option")).to_have_count(2)  # Alan, Alonzo; not Ada
    borrower.press_sequentially("a")  # "Ala"
    expect(listbox.get_by_role("option")).to_have_count(1)
    expect(borrower).to_have_attribute("aria-expanded", "true")
    assert violations(page) == []
    borrower.press("Enter")  # by keyboard: the active option
    expect(borrower).to_have_value("Alan Turing")  # the label, not the id
    expect(borrower).to_have_attribute("aria-expanded", "false")
    form.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Book: On Computable Numbers")).to_be_visible()
    _, found = lending.call("GET", "api/lending/book?isbn=978-0-00-000003", admin)
    _, alan = lending.call("GET", "api/lending/member?card=M-10", admin)
    assert found["data"][0]["borrower"] == alan["data"][0]["id"]
    expect(page.get_by_role("combobox", name="Borrower")).to_have_value("Alan Turing")
    page.context.close()


def test_selection_bulk_actions_and_csv_export(lending: UiServer, browser: Any, tmp_path: Path) -> None:
    admin = lending.token("root", ["admin"])
    ids = {}
    for n, name in enumerate(("Bulk A", "Bulk B", "Bulk C")):
        body = {"isbn": f"978-1-00-00000{n}", "headline": name, "author": 'Quote "and", comma'}
        status, book = lending.call("POST", "api/lending/book", admin, body)
        assert status == 201, book
        ids[name] = book["data"]["id"]
    page = signed_in(browser, lending, "root", ["admin"])
    page.goto(f"{lending.url}#/a/lending/desk/books")
    table = page.get_by_role("table", name="Books")
    table.get_by_role("row", name=re.compile("Bulk A")).get_by_role("checkbox").check()
    table.get_by_role("row", name=re.compile("Bulk B")).get_by_role("checkbox").check()
    bar = page.get_by_role("group", name="Selected rows")
    expect(bar).to_contain_text("2 selected")
    assert violations(page) == []
    bar.get_by_role("button", name="Check out").click()
    page.get_by_role("dialog").get_by_role("button", name="Confirm").click()
    expect(page.locator(".toast")).to_contain_text("Check out: 2 of 2 done.")
    for name in ("Bulk A", "Bulk B"):
        _, got = lending.call("GET", f"api/lending/book/{ids[name]}", admin)
        assert got["data"]["state"] == "checked_out"
    expect(bar).to_have_count(0)  # all done: the selection is cleared

    # only what every selected record allows: A is out, C is in, so neither move, but Delete
    table.get_by_role("row", name=re.compile("Bulk A")).get_by_role("checkbox").check()
    table.get_by_role("row", name=re.compile("Bulk C")).get_by_role("checkbox").check()
    expect(bar.get_by_role("button", name="Delete")).to_be_visible()
    expect(bar.get_by_role("button", name="Check out")).to_have_count(0)
    expect(bar.get_by_role("button", name="Check in")).to_have_count(0)
    # C goes away behind the page's back: its row reports why, A is deleted, C stays selected
    page.evaluate("() => window.dapLive.drop(60000)")
    status, _ = lending.call("DELETE", f"api/lending/book/{ids['Bulk C']}", admin)
    assert status == 204
    bar.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Confirm").click()
    expect(bar.get_by_role("alert")).to_contain_text("Bulk C:")
    expect(bar).to_contain_text("1 selected")
    assert lending.call("GET", f"api/lending/book/{ids['Bulk A']}", admin)[0] == 404

    # the CSV export of the list is what the list API answers, every row and field
    formula = '=HYPERLINK("http://evil.example","Open")'
    body = {"isbn": "978-1-00-000009", "headline": "Bulk formula", "author": formula}
    status, book = lending.call("POST", "api/lending/book", admin, body)
    assert status == 201, book
    page.reload()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV").click()
    path = tmp_path / "books.csv"
    download.value.save_as(path)
    with path.open(newline="") as f:
        exported = list(csv.DictReader(f))
    _, listed = lending.call("GET", "api/lending/book?limit=1000", admin)
    assert sorted(r["id"] for r in exported) == sorted(r["id"] for r in listed["data"])
    by_id = {r["id"]: r for r in exported}
    assert by_id[ids["Bulk B"]]["author"] == 'Quote "and", comma'
    assert by_id[ids["Bulk B"]]["state"] == "checked_out"
    assert by_id[book["data"]["id"]]["author"] == "'" + formula  # guarded: a spreadsheet shows text
    text = path.read_text()
    # the export imports back as it was: every row found by its id, nothing to write
    status, back = _import(lending, admin, "lending/book", text)
    assert status == 200, back
    assert (back["created"], back["updated"], back["unchanged"]) == (0, 0, len(exported)), back
    page.context.close()


def test_header_search_with_slash(lending: UiServer, browser: Any, shelf: dict[str, Any]) -> None:
    page = signed_in(browser, lending, "root", ["admin"], viewport=PHONE)
    page.goto(f"{lending.url}#/a/lending/desk/books")
    expect(page.get_by_role("heading", name="Books", level=1)).to_be_visible()
    page.get_by_role("heading", name="Books", level=1).click()  # focus in the page, not in an input
    page.keyboard.press("/")
    box = page.get_by_role("searchbox", name="Search records (press /)")
    expect(box).to_be_focused()
    page.keyboard.type("lovelace")
    results = page.get_by_role("region", name="Search results")
    members = results.get_by_role("region", name="Member")
    expect(members.get_by_role("link", name="Ada Lovelace")).to_be_visible()
    expect(results.get_by_role("region", name="Book")).to_have_count(0)  # no title matches
    assert violations(page) == []
    members.get_by_role("link", name="Ada Lovelace").click()
    expect(page.get_by_role("heading", name="Member: Ada Lovelace")).to_be_visible()
    expect(results).to_have_count(0)
    page.context.close()


def _png(colour: tuple[int, int, int]) -> bytes:
    """A 2x2 PNG of one colour (zlib and CRC from the standard library)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(colour) * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_file_field_upload_preview_download_replace_remove(
    lending: UiServer, browser: Any, tmp_path: Path
) -> None:
    admin = lending.token("root", ["admin"])
    status, book = lending.call(
        "POST", "api/lending/book", admin, {"isbn": "978-2-00-000001", "headline": "Cover Story"}
    )
    assert status == 201, book
    record = book["data"]
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(_png((200, 0, 0)))
    blue.write_bytes(_png((0, 0, 200)))
    page = signed_in(browser, lending, "root", ["admin"], viewport=PHONE)
    page.goto(f"{lending.url}#/a/lending/desk/book/{record['id']}")
    cover = page.get_by_role("group", name="Cover")
    expect(cover).to_contain_text("No file.")
    cover.get_by_label("Upload Cover").set_input_files(str(red))
    preview = cover.get_by_role("img", name="Cover: red.png")
    expect(preview).to_be_visible()
    assert page.evaluate("(img) => img.naturalWidth", preview.element_handle()) == 2
    assert violations(page) == []
    shot(page, "desk-file-phone")
    with page.expect_download() as download:
        cover.get_by_role("link", name="Download Cover").click()
    saved = tmp_path / "got.png"
    download.value.save_as(saved)
    assert saved.read_bytes() == red.read_bytes() and download.value.suggested_filename == "red.png"

    cover.get_by_label("Replace Cover").set_input_files(str(blue))
    expect(cover.get_by_role("img", name="Cover: blue.png")).to_be_visible()
    status, got = lending.call("GET", f"api/lending/book/{record['id']}", admin)
    assert got["data"]["cover"] and got["data"]["version"] > record["version"]

    # the list previews the cover on demand (an image field), with no file fetched before
    page.goto(f"{lending.url}#/a/lending/desk/books")
    row = page.get_by_role("row", name=re.compile("Cover Story"))
    with page.expect_response(re.compile(r"/_files/cover$")) as fetched:
        row.get_by_role("button", name="Preview Cover of Cover Story").click()
    assert fetched.value.status == 200
    thumb = row.get_by_role("img", name="Cover of Cover Story: blue.png")
    expect(thumb).to_be_visible()
    assert page.evaluate("(img) => img.naturalWidth", thumb.element_handle()) == 2
    assert violations(page) == []
    page.goto(f"{lending.url}#/a/lending/desk/book/{record['id']}")
    cover = page.get_by_role("group", name="Cover")
    cover.get_by_role("button", name="Remove Cover").click()
    expect(cover).to_contain_text("No file.")
    _, got = lending.call("GET", f"api/lending/book/{record['id']}", admin)
    assert got["data"]["cover"] is None
    page.context.close()


def test_stale_file_replace_is_explained_with_reload(lending: UiServer, browser: Any, tmp_path: Path) -> None:
    """Issue 40 row 20: a Replace (or Remove) at an old version says what a stale Save says, with
    Reload, not the server's raw "the record is at version 3, not 2"."""
    admin = lending.token("root", ["admin"])
    status, book = lending.call(
        "POST", "api/lending/book", admin, {"isbn": "978-2-00-000002", "headline": "Two Desks"}
    )
    assert status == 201, book
    record = book["data"]
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(_png((200, 0, 0)))
    blue.write_bytes(_png((0, 0, 200)))
    mine = signed_in(browser, lending, "root", ["admin"])
    mine.goto(f"{lending.url}#/a/lending/desk/book/{record['id']}")
    form = mine.locator("form#form-lending-book")
    cover = mine.get_by_role("group", name="Cover")
    cover.get_by_label("Upload Cover").set_input_files(str(red))
    expect(cover.get_by_role("img", name="Cover: red.png")).to_be_visible()
    expect(mine.locator("html[data-live=live]")).to_have_count(1)
    # the live update is missed (the socket is away), so only the upload's 412 can tell
    mine.evaluate("() => window.dapLive.drop(60000)")
    expect(mine.locator("html[data-live=offline]")).to_have_count(1)

    # a second session (a librarian) changes the record meanwhile
    theirs = signed_in(browser, lending, "lib", ["librarian"])
    theirs.goto(f"{lending.url}#/a/lending/desk/book/{record['id']}")
    their_form = theirs.locator("form#form-lending-book")
    their_form.get_by_label("Author").fill("A. Other")
    their_form.get_by_role("button", name="Save").click()
    expect(theirs.get_by_role("status")).to_contain_text("Saved.")
    theirs.context.close()

    cover.get_by_label("Replace Cover").set_input_files(str(blue))
    status_region = mine.get_by_role("status")
    expect(status_region).to_contain_text("Someone else changed this record since you opened it.")
    expect(mine.get_by_role("alert")).to_have_count(0)  # not "the record is at version 3, not 2"
    expect(mine.locator(".toast.error")).to_contain_text("Not saved: someone else changed this record.")
    expect(cover.get_by_role("img", name="Cover: red.png")).to_be_visible()
    assert violations(mine) == []
    _, got = lending.call("GET", f"api/lending/book/{record['id']}", admin)
    assert got["data"]["author"] == "A. Other"

    status_region.get_by_role("button", name="Reload").click()
    expect(form.get_by_label("Author")).to_have_value("A. Other")
    expect(mine.locator(".form-block .notice")).not_to_contain_text("Someone else changed")
    cover.get_by_label("Replace Cover").set_input_files(str(blue))
    expect(cover.get_by_role("img", name="Cover: blue.png")).to_be_visible()
    _, got = lending.call("GET", f"api/lending/book/{record['id']}", admin)
    assert got["data"]["author"] == "A. Other"

    # Remove is a PATCH at the record's version: the same notice when it is old
    status, answer = lending.call(
        "PATCH",
        f"api/lending/book/{record['id']}",
        admin,
        {"author": "B. Other"},
        {"If-Match": f'"{got["data"]["version"]}"'},
    )
    assert status == 200, answer
    cover.get_by_role("button", name="Remove Cover").click()
    expect(status_region).to_contain_text("Someone else changed this record since you opened it.")
    expect(mine.get_by_role("alert")).to_have_count(0)
    _, got = lending.call("GET", f"api/lending/book/{record['id']}", admin)
    assert got["data"]["cover"]
    mine.context.close()


def _import(server: UiServer, token: str, entity: str, text: str, dry: bool = False) -> tuple[int, Any]:
    url = f"{server.api}/default/api/{entity}/_import" + ("?dry_run=true" if dry else "")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/csv"}
    request = urllib.request.Request(url, data=text.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_csv_import_all_or_nothing_under_the_callers_rules(lending: UiServer) -> None:
    admin = lending.token("root", ["admin"])
    librarian = lending.token("lib", ["librarian"])
    good = "card,full_name,email\nI-1,Imre Lakatos,imre@example.org\nI-2,Karl Popper,\n"

    def cards() -> set[str]:
        _, found = lending.call("GET", "api/lending/member?card[like]=I-%25&limit=100", admin)
        return {m["card"] for m in found["data"]}

    status, preview = _import(lending, librarian, "lending/member", good, dry=True)
    assert status == 200 and preview["dry_run"] and preview["created"] == 2, preview
    assert cards() == set()  # a preview changes nothing

    bad = good + "I-3,,missing name\n"  # line 4 lacks the required full_name
    status, refused = _import(lending, librarian, "lending/member", bad)
    assert status == 422 and refused["code"] == "SVC.IMPORT.ROWS", refused
    assert any(p["line"] == 4 and p["field"] == "full_name" for p in refused["problems"]), refused
    assert cards() == set()  # nothing half-imported

    status, done = _import(lending, librarian, "lending/member", good)
    assert status == 200 and done["created"] == 2, done
    assert cards() == {"I-1", "I-2"}
    status, again = _import(lending, librarian, "lending/member", good)
    assert status == 200 and again["created"] == 0 and again["unchanged"] == 2, again

    # the caller's own permissions: a visitor may create nothing, so nothing is imported
    visitor = lending.token("vic", ["visitor"])
    status, denied = _import(lending, visitor, "lending/member", "card,full_name\nI-9,Nobody\n")
    assert (status, denied["code"]) == (403, "SVC.AUTH.FORBIDDEN"), denied  # as its REST create
    assert "I-9" not in cards()
    assert lending.call("POST", "api/lending/member", visitor, {"card": "I-9", "full_name": "N"})[0] == 403
    # the loader's vote column would vote as someone else: refused before anything runs
    status, refused = _import(lending, admin, "lending/member", "card,full_name,_votes\nI-8,X,y\n")
    assert status == 422 and refused["code"] == "SVC.IMPORT.COLUMNS", refused
    # an entity REST does not expose takes no import either
    status, missing = _import(lending, admin, "lending/nothing_here", "card\nI-7\n")
    assert status == 404 and missing["code"] == "SVC.ENTITY.NOT_FOUND", missing


def test_csv_import_in_the_browser(lending: UiServer, browser: Any, tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.csv", tmp_path / "members.csv"
    bad.write_text("card,full_name\nB-1,Barbara Liskov\nB-2,\n")
    good.write_text("card,full_name,email\nB-1,Barbara Liskov,bl@example.org\nB-2,Edsger Dijkstra,\n")
    page = signed_in(browser, lending, "lib", ["librarian"], viewport=PHONE)
    page.goto(f"{lending.url}#/a/lending/desk/members")
    expect(page.get_by_role("heading", name="Members", level=1)).to_be_visible()
    page.get_by_label("Import CSV").set_input_files(str(bad))
    dialog = page.get_by_role("dialog", name="Import bad.csv into Member")
    mapping = dialog.get_by_role("table", name="Column mapping")
    expect(mapping.get_by_role("row", name="full_name Full name")).to_be_visible()
    expect(dialog.get_by_role("alert")).to_contain_text("Line 3, full_name")
    expect(dialog.get_by_role("button", name="Import")).to_be_disabled()
    assert violations(page) == []
    dialog.get_by_role("button", name="Cancel").click()
    page.get_by_label("Import CSV").set_input_files(str(good))
    dialog = page.get_by_role("dialog", name="Import members.csv into Member")
    expect(dialog).to_contain_text("2 row(s): 2 to create, 0 to update, 0 unchanged.")
    shot(page, "desk-import-phone")
    dialog.get_by_role("button", name="Import").click()
    expect(page.locator(".toast")).to_contain_text("Imported members.csv: 2 created, 0 updated.")
    table = page.get_by_role("table", name="Members")
    expect(table.get_by_role("cell", name="Edsger Dijkstra")).to_be_visible()
    page.context.close()
