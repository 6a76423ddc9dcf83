"""Sign-in pages in Chromium: a real ``dap serve`` of the procurement example whose workspace
declares Dex (tests/dex.py) as a provider, mailing through an SMTP server on loopback.

The login page offers "Sign in with Dex"; Dex's own login form takes alice's password; back in
the UI she is signed in (her name in the header), the address holds no token or code, and the
API answers her ID token, which the UI renews before it expires (Dex issues 75 s tokens here).
Sign-out ends the provider session on the server: a reload stays on the login page and the
session cookie no longer yields a token.

A local user who forgot their password asks for a link, opens it from the mail (the token leaves
the address bar at once), sets a new password and signs in with it; the link does not work twice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import expect

from tests import dex, mailbox
from tests.conftest import fresh_database

from .conftest import ADMIN, ARTIFACTS, BUNDLE, CHROMIUM_ARGS, DAP, SECRET, chromium_path, shot


@dataclass
class Served:
    url: str  # the workspace's UI
    admin: str
    inbox: mailbox.Inbox


@pytest.fixture(scope="module")
def served(pg_server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if not (BUNDLE / "index.html").is_file():
        pytest.skip("no UI bundle: run `make ui` (needs npm) to build dap/server/web/bundle")
    if chromium_path() is None:
        pytest.skip("Chromium not found: `apt-get install -y chromium` (make test does it when root)")
    pytest.importorskip("aiosmtpd", reason="aiosmtpd is a test dependency (pip install -e .[test])")
    port, admin_port = dex.free_port(), dex.free_port()
    base = f"http://127.0.0.1:{port}"
    work = tmp_path_factory.mktemp("oidc-ui")
    with (
        # ID tokens of 75 s: the UI renews them 60 s before expiry, so 15 s after sign-in
        dex.running([f"{base}/default/_ui/oidc/callback"], work, id_tokens="75s") as provider,
        mailbox.smtp_server() as inbox,
    ):
        spec = dex.write_spec(dex.procurement_files(provider.issuer), work / "spec")
        _name, dsn = fresh_database(pg_server_dsn)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
        env.update({"DAP_DSN": dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": "http://ui.example"})
        env.update({dex.SECRET_ENV: dex.CLIENT_SECRET, "DAP_PUBLIC_URL": base, **inbox.env()})
        args = [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--web-dir", str(BUNDLE)]
        args += ["--metrics-addr", f"127.0.0.1:{admin_port}", "--admin-secret", ADMIN]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        log = ARTIFACTS / "oidc-server.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(args, env=env, stderr=sink, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while "dap serve: listening" not in (said := log.read_text()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"dap serve did not start: {said[-2000:]}")
                time.sleep(0.1)
            yield Served(f"{base}/default/", f"http://127.0.0.1:{admin_port}", inbox)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def chromium(served: Served) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def test_sign_in_and_out_through_dex(served: Served, chromium: Any) -> None:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served.url)
    page.get_by_role("link", name="Sign in with Dex").click()
    page.wait_for_url("**/dex/**")  # Dex's own login form
    page.locator("input[name=login]").fill("alice@example.com")
    page.locator("input[name=password]").fill(dex.PASSWORD)
    page.locator("button[type=submit]").click()
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()
    expect(page.get_by_text("alice").first).to_be_visible()
    url = page.url
    assert "code=" not in url and "state=" not in url and "token" not in url, url
    token = page.evaluate("() => sessionStorage.getItem('dap.token.default')")
    assert token and token.count(".") == 2
    answer = page.evaluate(
        "async (t) => (await fetch('/default/api/buying/purchase_order',"
        " {headers: {Authorization: 'Bearer ' + t}})).status",
        token,
    )
    assert answer == 200
    shot(page, "oidc-signed-in")
    # the UI renews the ID token through the server's refresh grant before it expires
    page.wait_for_function(
        "(old) => sessionStorage.getItem('dap.token.default') !== old", arg=token, timeout=40_000
    )
    renewed = page.evaluate("() => sessionStorage.getItem('dap.token.default')")
    assert renewed and renewed != token
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in with Dex")).to_be_visible()
    status = page.evaluate(
        "async () => (await fetch('/default/_ui/oidc/session', {method: 'POST',"
        " headers: {'Content-Type': 'application/json'}, body: '{}'})).status"
    )
    assert status == 401  # the provider session ended on the server
    page.reload()
    expect(page.get_by_role("link", name="Sign in with Dex")).to_be_visible()
    assert not errors, errors
    context.close()


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def test_a_forgotten_password_is_reset_by_the_mailed_link(served: Served, chromium: Any) -> None:
    code = _post(f"{served.admin}/workspaces/default/setup-code", {}, {"Authorization": f"Bearer {ADMIN}"})
    body = {
        "setup_code": code["setup_code"],
        "username": "root",
        "password": "correct horse",
        "email": "root@x.example",
    }
    _post(f"{served.url}_ui/setup", body)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(served.url)
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Username").fill("root")
    page.get_by_role("button", name="Send the link").click()
    expect(page.get_by_role("status")).to_contain_text("a link to choose a new password is on its way")
    served.inbox.wait_blocking(1)  # the mail goes out after the answer
    assert len(served.inbox.messages) == 1
    link = served.inbox.link()
    page.goto(link)
    expect(page.get_by_role("heading", name=re.compile("Choose a new password"))).to_be_visible()
    expect(page).not_to_have_url(re.compile("token"))  # taken out of the address as the page opens
    page.get_by_label("New password (8 characters or more)").fill("battery staple")
    page.get_by_role("button", name="Set the password").click()
    expect(page.get_by_role("status")).to_contain_text("Your password is changed")
    page.get_by_role("link", name="Sign in").click()
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("battery staple")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("heading", name="Purchase orders", level=1)).to_be_visible()
    second = context.new_page()  # the same link again
    second.goto(link)
    second.get_by_label("New password (8 characters or more)").fill("third password")
    second.get_by_role("button", name="Set the password").click()
    expect(second.get_by_role("alert")).to_contain_text("used already or expired")
    context.close()
