"""Browser tests: a real ``dap serve`` of examples/procurement with the built bundle, driven in
Debian's Chromium through Playwright (``executable_path``; a browser is never downloaded).

``make ui`` builds the bundle and ``make test`` installs Chromium with apt-get when it is missing
and the caller is root; where either is still absent the tests skip saying which.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.conftest import fresh_database

ROOT = Path(__file__).parents[2]
BUNDLE = ROOT / "dap" / "server" / "web" / "bundle"
SPEC = ROOT / "examples" / "procurement"
SECRET = "ui-test-secret-of-at-least-thirty-two-bytes-long"
ADMIN = "ui-admin-secret"
ARTIFACTS = ROOT / ".dap" / "ui-artifacts"
DAP = str(Path(sys.executable).parent / "dap")

# Chromium without a sandbox (root in a container), GPU or background traffic; see docs/ui.md.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class UiServer:
    url: str  # the workspace's UI, e.g. http://127.0.0.1:PORT/default/
    api: str
    admin: str

    def setup_code(self) -> str:
        request = urllib.request.Request(
            f"{self.admin}/workspaces/default/setup-code",
            method="POST",
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return str(json.load(resp)["setup_code"])

    def token(self, username: str, roles: list[str]) -> str:
        now = int(time.time())
        claims = {
            "sub": f"u-{username}",
            "username": username,
            "roles": roles,
            "iss": "svc",
            "iat": now,
            "exp": now + 3600,
        }
        return jwt.encode(claims, SECRET, algorithm="HS256")

    def call(
        self, method: str, path: str, token: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        h = {"Authorization": f"Bearer {token}", **(headers or {})}
        if data is not None:
            h["Content-Type"] = "application/json"
        request = urllib.request.Request(f"{self.api}/default/{path}", data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            text = exc.read()
            return exc.code, json.loads(text) if text else None


@contextlib.contextmanager
def serving(pg_server_dsn: str, spec: Path = SPEC, log_name: str = "server.log") -> Iterator[UiServer]:
    """``dap serve`` of ``spec`` with the built bundle on a fresh database (skips without the
    bundle or Chromium); the server's log lands in .dap/ui-artifacts/``log_name``."""
    if not (BUNDLE / "index.html").is_file():
        pytest.skip("no UI bundle: run `make ui` (needs npm) to build dap/server/web/bundle")
    if chromium_path() is None:
        pytest.skip("Chromium not found: `apt-get install -y chromium` (make test does it when root)")
    _name, dsn = fresh_database(pg_server_dsn)
    port, admin_port = _port(), _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update({"DAP_DSN": dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": "http://ui.example"})
    args = [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}"]
    args += ["--metrics-addr", f"127.0.0.1:{admin_port}", "--admin-secret", ADMIN, "--web-dir", str(BUNDLE)]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / log_name  # the server's JSON log lines, kept with the screenshots
    with log.open("w") as sink:
        proc = subprocess.Popen(args, env=env, stderr=sink, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while "dap serve: listening" not in (said := log.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dap serve did not start: {said[-2000:]}")
            time.sleep(0.1)
        assert "UI from" in said, said
        api = f"http://127.0.0.1:{port}"
        yield UiServer(url=f"{api}/default/", api=api, admin=f"http://127.0.0.1:{admin_port}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def ui_server(pg_server_dsn: str) -> Iterator[UiServer]:
    with serving(pg_server_dsn) as server:
        yield server


@pytest.fixture(scope="module")
def browser(ui_server: UiServer) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:  # Playwright gives every launch a fresh temporary profile
        chromium = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def shot(page: Any, name: str) -> None:
    """A screenshot kept as a test artifact (.dap/ui-artifacts/)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    """On a failure, a screenshot of every open page (failed-<test>-<n>.png)."""
    outcome = yield
    report = outcome.get_result()
    chromium = item.funcargs.get("browser") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and chromium is not None:
        for i, context in enumerate(chromium.contexts):
            for j, page in enumerate(context.pages):
                with contextlib.suppress(Exception):
                    shot(page, f"failed-{item.name}-{i}-{j}")


def signed_in(browser: Any, server: UiServer, username: str, roles: list[str], **options: Any) -> Any:
    """A page in a fresh browser context signed in as ``username`` with ``roles``: a token signed
    with the server's JWT secret, put where the UI keeps it (sessionStorage) before any script."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **options})
    token = server.token(username, roles)
    context.add_init_script(f"sessionStorage.setItem('dap.token.default', {token!r})")
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page
