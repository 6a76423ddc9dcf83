"""Sign-in through Dex, a real OpenID provider on loopback, over HTTP (the browser's steps without one).

The authorization code flow end to end: the redirect carries a PKCE S256 challenge, state and
nonce; Dex's login form is filled; the callback leaves a session cookie and an address without a
token; a replayed callback (the same ``state``) is refused; the UI's session, refresh and logout
calls work, and after logout the session is gone. Role mapping: Dex's group ``committee`` is the
spec's ``purchase_committee`` and its ``buyers`` are ``buyer``, so alice may vote on a purchase
order's approval and bob may not. A key Dex rotates on its own schedule is taken without a restart.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from datetime import date
from typing import Any

import aiohttp
import jwt
import pytest

from dap import config
from dap.server.catalog import Catalog
from tests import dex

from .conftest import Running, running, token


@pytest.fixture(scope="module")
def dap_port() -> int:
    return dex.free_port()


@pytest.fixture(scope="module")
def provider(dap_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dex.Dex]:
    callback = f"http://127.0.0.1:{dap_port}/default/_ui/oidc/callback"
    # a new signing key about every 30 s (Dex's own check interval), for the rotation test
    with dex.running([callback], tmp_path_factory.mktemp("dex"), rotate_keys="1s") as found:
        yield found


@pytest.fixture
async def srv(
    pg_dsn: str, provider: dex.Dex, dap_port: int, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Running]:
    monkeypatch.setenv(dex.SECRET_ENV, dex.CLIENT_SECRET)
    catalog = Catalog.from_spec(config.load_files(dex.procurement_files(provider.issuer)))
    async with running(pg_dsn, catalog, addr=f"127.0.0.1:{dap_port}") as found:
        yield found


async def _sign_in(srv: Running, http: aiohttp.ClientSession, username: str) -> str:
    """Through Dex's login form; the callback URL the provider sent the browser to."""
    async with http.get(f"{srv.api}/default/_ui/oidc/dex/start", allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
        location = resp.headers["Location"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["state"][0] and query["nonce"][0]
    async with http.get(location) as resp:  # Dex's one connector: straight to its login form
        page = await resp.text()
        form_url = str(resp.url)
    action = re.search(r'<form[^>]*action="([^"]*)"', page)
    target = urllib.parse.urljoin(form_url, action.group(1).replace("&amp;", "&")) if action else form_url
    form = {"login": f"{username}@example.com", "password": dex.PASSWORD}
    url = target
    async with http.post(url, data=form, allow_redirects=False) as resp:
        assert resp.status in (302, 303), await resp.text()
        url = urllib.parse.urljoin(url, resp.headers["Location"])
    while not url.startswith(f"{srv.api}/default/_ui/oidc/callback"):
        async with http.get(url, allow_redirects=False) as resp:
            assert resp.status in (302, 303), await resp.text()
            url = urllib.parse.urljoin(url, resp.headers["Location"])
    return url


async def test_code_flow_session_refresh_logout_and_replayed_state(srv: Running) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        callback = await _sign_in(srv, http, "alice")
        async with http.get(callback, allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
            assert resp.headers["Location"] == "/default/#/signed-in"  # no token, no code
            assert "HttpOnly" in resp.headers["Set-Cookie"]
        async with http.get(callback, allow_redirects=False) as resp:  # the same state again
            assert resp.status == 403 and (await resp.json())["code"] == "SVC.AUTH.BAD_STATE"
        async with http.post(f"{srv.api}/default/_ui/oidc/session", json={}) as resp:
            claimed = await resp.json()
            assert resp.status == 200, claimed
        bearer = {"Authorization": f"Bearer {claimed['data']['token']}"}
        async with http.get(f"{srv.api}/default/api/buying/purchase_order", headers=bearer) as resp:
            assert resp.status == 200, await resp.text()
        async with http.post(f"{srv.api}/default/_ui/oidc/refresh", json={}) as resp:
            renewed = await resp.json()
            assert resp.status == 200, renewed
        assert renewed["data"]["token"] != claimed["data"]["token"]
        async with http.post(f"{srv.api}/default/_ui/oidc/logout", json={}) as resp:
            ended = await resp.json()
            assert resp.status == 200, ended
        assert ended["data"]["end_session_url"] is None  # Dex advertises no end_session_endpoint
        async with http.post(f"{srv.api}/default/_ui/oidc/session", json={}) as resp:
            assert resp.status == 401


async def test_a_forged_state_is_refused(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/_ui/oidc/callback?code=x&state=made-up") as resp:
        assert resp.status == 403 and (await resp.json())["code"] == "SVC.AUTH.BAD_STATE"


async def _call(srv: Running, method: str, path: str, bearer: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {bearer}"}
    async with srv.http.request(method, f"{srv.api}/default/api/{path}", json=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_groups_map_to_roles_so_one_may_approve_and_the_other_not(
    srv: Running, provider: dex.Dex
) -> None:
    admin = token(username="root", roles=["admin"])
    _, supplier = await _call(srv, "POST", "buying/supplier", admin, {"name": "Axe Ltd", "region": "south"})
    body = {
        "supplier": supplier["data"]["id"],
        "order_date": date.today().isoformat(),
        "region": "south",
        "lines": [],
    }
    status, order = await _call(srv, "POST", "buying/purchase_order", admin, body)
    assert status == 201, order
    path = f"buying/purchase_order/{order['data']['id']}"
    assert (await _call(srv, "POST", f"{path}/request_approval", admin, {}))[0] == 200
    assert (await _call(srv, "POST", f"{path}/approve", admin, {}))[0] == 202
    status, found = await _call(srv, "GET", f"{path}/_approvals", admin)
    assert status == 200, found
    approval = found["data"][0]["id"]
    alice = provider.password_grant("alice")["id_token"]
    bob = provider.password_grant("bob")["id_token"]
    status, answer = await _call(srv, "POST", f"_approvals/{approval}/approve", bob, {})
    assert status in (403, 404), answer  # a buyer is no committee member
    status, answer = await _call(srv, "POST", f"_approvals/{approval}/approve", alice, {})
    assert status == 200, answer
    status, mine = await _call(srv, "GET", "_approvals", alice)
    assert status == 200, mine


async def test_a_key_dex_rotates_is_taken_without_restart(srv: Running, provider: dex.Dex) -> None:
    # Dex replaces its signing key on its own schedule; the server, never restarted, fetches the
    # new key set at the first token signed by a key id it has not seen
    before = provider.password_grant("alice")["id_token"]
    kid = jwt.get_unverified_header(before)["kid"]
    assert (await _call(srv, "GET", "buying/supplier", before))[0] == 200
    deadline = time.monotonic() + 90
    while True:
        after = provider.password_grant("alice")["id_token"]
        if jwt.get_unverified_header(after)["kid"] != kid:
            break
        assert time.monotonic() < deadline, "Dex did not rotate its signing key within 90 s"
        await asyncio.sleep(1)
    status, answer = await _call(srv, "GET", "buying/supplier", after)
    assert status == 200, answer
