"""The outside probe's cases (issue 17): each answered with a problem document, never a 500.

Every case here was a 500, a plain-text 400, an accepted bad value or a missing header before.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from .conftest import ADMIN, Running, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

P = "/default/api/shop/product"
JSON = {"Content-Type": "application/json"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn) as r:
        await r.register("default")
        yield r


async def call(
    srv: Running, method: str, path: str, *, raw: bytes | None = None, body: Any = None, **headers: str
) -> tuple[int, Any, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {**JSON, **srv.auth(), **headers}
    async with srv.http.request(method, srv.api + path, data=data, headers=hdrs) as resp:
        text = await resp.text()
        assert resp.status < 500, text
        problem = json.loads(text) if resp.content_type.endswith("json") and text else text
        return resp.status, problem, resp.headers


def product(sku: str, **kw: Any) -> dict[str, Any]:
    return {"sku": sku, "title": f"Product {sku}", "price": "9.99", **kw}


async def test_a_slug_with_a_trailing_newline_is_no_workspace(srv: Running) -> None:
    status, problem, _ = await call(srv, "GET", "/default%0A/api/shop/product")
    assert (status, problem["code"]) == (404, "SVC.WORKSPACE.NOT_FOUND")
    async with srv.http.post(
        f"{srv.admin}/workspaces", json={"slug": "acme\n"}, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as resp:
        assert resp.status == 422
        assert (await resp.json())["code"] == "SVC.WORKSPACE.INVALID_SLUG"


MEDIA = ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"]


@pytest.mark.parametrize("media", MEDIA)
async def test_a_body_that_is_not_json_is_415(srv: Running, media: str) -> None:
    raw = json.dumps(product(f"M{MEDIA.index(media)}")).encode()
    status, problem, _ = await call(srv, "POST", P, raw=raw, **{"Content-Type": media})
    assert (status, problem["code"]) == (415, "SVC.REQUEST.UNSUPPORTED_MEDIA_TYPE")
    status, answer, _ = await call(
        srv, "POST", P, raw=raw, **{"Content-Type": "application/json; charset=utf-8"}
    )
    assert status == 201, answer


@pytest.mark.parametrize("depth", [65, 5_000, 200_000], ids=["past-limit", "deep", "recursion"])
async def test_deeply_nested_json_is_400(srv: Running, depth: int) -> None:
    raw = b'{"sku": "N1", "title": "t", "price": "1", "attrs": ' + b"[" * depth + b"]" * depth + b"}"
    status, problem, _ = await call(srv, "POST", P, raw=raw)
    assert (status, problem["code"]) == (400, "SVC.REQUEST.TOO_DEEP")


async def test_a_string_too_long_for_its_index_is_422(srv: Running) -> None:
    status, problem, _ = await call(srv, "POST", P, body=product("x" * 3000))
    assert status == 422
    assert problem["errors"] == [
        {"path": "sku", "message": "at most 500 characters (the field is indexed), got 3000"}
    ]
    long_title = product("L1", title="t" * 20_000)  # an unindexed string has a default bound too
    status, problem, _ = await call(srv, "POST", P, body=long_title)
    assert (status, problem["errors"][0]["path"]) == (422, "title")


@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
async def test_blank_strings_in_required_fields_are_422(srv: Running, blank: str) -> None:
    status, problem, _ = await call(srv, "POST", P, body=product("B1", title=blank))
    assert status == 422
    assert {"path": "title", "message": "is required and must not be blank"} in problem["errors"]


async def test_if_match_compares_strongly(srv: Running) -> None:
    status, created, _ = await call(srv, "POST", P, body=product("IM1"))
    assert status == 201
    url = f"{P}/{created['data']['id']}"
    status, problem, _ = await call(srv, "PATCH", url, body={"qty": 2}, **{"If-Match": 'W/"1"'})
    assert (status, problem["code"]) == (412, "SVC.REQUEST.IF_MATCH_WEAK")
    status, _, headers = await call(srv, "PATCH", url, body={"qty": 2}, **{"If-Match": '"1"'})
    assert (status, headers["ETag"]) == (200, '"2"')
    status, _, _ = await call(srv, "PATCH", url, body={"qty": 3}, **{"If-Match": "*"})
    assert status == 200


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        pytest.param("PATCH", "/default/api/shop/order/{id}", "GET", id="not-exposed"),
        pytest.param("PUT", P, "GET, POST", id="router"),
        pytest.param("POST", "/default/api/shop/order/{id}/submit", "", id="move-closed"),
    ],
)
async def test_every_405_says_what_is_allowed(srv: Running, method: str, path: str, allow: str) -> None:
    status, created, _ = await call(srv, "POST", "/default/api/shop/order", body={"number": "A-1"})
    assert status == 201
    status, problem, headers = await call(srv, method, path.format(id=created["data"]["id"]), body={})
    assert status == 405, problem

    def methods(text: str) -> set[str]:
        return {m.strip() for m in text.split(",")} - {"", "HEAD"}

    assert methods(headers["Allow"]) == methods(allow)


async def test_docstatus_cannot_be_matched_with_like(srv: Running) -> None:
    for op in ("like", "ilike"):
        status, problem, _ = await call(srv, "GET", f"/default/api/shop/order?docstatus[{op}]=dr%25")
        assert (status, problem["code"]) == (400, "SVC.QUERY.INVALID")


@pytest.mark.parametrize("offset", ["9223372036854775808", "99999999999999999999999", "-1", "\uff11"])
async def test_offsets_beyond_bigint_are_400(srv: Running, offset: str) -> None:
    status, created, _ = await call(srv, "POST", P, body=product(f"O{len(offset)}{offset[:2]}"))
    assert status == 201
    for path in (f"{P}?offset={offset}", f"{P}/{created['data']['id']}/_audit?offset={offset}"):
        status, problem, _ = await call(srv, "GET", path)
        assert (status, problem["code"]) == (400, "SVC.QUERY.INVALID"), path


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        pytest.param({"Authorization": "Bearer " + "x" * 9_000}, 431, "HEADERS_TOO_LARGE", id="bearer-9k"),
        pytest.param({"X-Big": "x" * 20_000}, 431, "HEADERS_TOO_LARGE", id="other-20k"),
        pytest.param({"Cookie": "c=" + "x" * 8_200}, 431, "HEADERS_TOO_LARGE", id="cookie"),
        pytest.param({f"X-H{n}": "x" for n in range(200)}, 431, "HEADERS_TOO_LARGE", id="200-fields"),
        pytest.param({"Authorization": "Bearer " + "x" * 8_000}, 401, "INVALID_TOKEN", id="bearer-8000"),
    ],
)
async def test_an_oversized_header_is_a_problem_document_with_a_true_title(
    srv: Running, headers: dict[str, str], status: int, code: str
) -> None:
    async with srv.http.get(srv.api + P, headers={**srv.auth(), **headers}) as resp:
        assert resp.status == status
        assert resp.content_type == "application/problem+json"
        problem = await resp.json()
    assert (problem["status"], problem["code"].rsplit(".", 1)[1]) == (status, code)
    assert problem["title"] == {431: "Request header fields too large", 401: "Unauthorized"}[status]
    assert "xxxx" not in problem["detail"]  # the offending bytes are not echoed back


async def test_an_oversized_request_line_is_414(srv: Running) -> None:
    async with srv.http.get(srv.api + P + "?q=" + "x" * 9_000, headers=srv.auth()) as resp:
        assert resp.status == 414
        problem = await resp.json(content_type=None)
    assert (problem["title"], problem["code"]) == ("URI too long", "SVC.REQUEST.URI_TOO_LONG")
    assert "xxxx" not in problem["detail"]


async def test_a_status_without_a_class_is_titled_by_its_phrase() -> None:
    from dap.server import errors

    assert errors.OtherHttpError(418, "short and stout").problem()["title"] == "I'm a Teapot"
    assert errors.OtherHttpError(499, "?").problem()["title"] == "HTTP 499"


# --- first-admin setup and login ----------------------------------------------------------------


async def _post(srv: Running, url: str, body: Any, **headers: str) -> tuple[int, Any, Any]:
    async with srv.http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers


def _admin(code: str | None, username: str = "root") -> dict[str, Any]:
    body: dict[str, Any] = {"username": username, "password": "correct horse battery"}
    return body if code is None else {**body, "setup_code": code}


async def test_setup_needs_the_one_time_code(srv: Running) -> None:
    code = (await srv.register("claim-me"))["setup_code"]
    url = f"{srv.api}/claim-me/_ui/setup"
    status, problem, _ = await _post(srv, url, _admin(None))
    assert (status, problem["errors"][0]["path"]) == (422, "setup_code")
    status, problem, _ = await _post(srv, url, _admin("not-the-code"))
    assert (status, problem["code"]) == (403, "SVC.SETUP.CODE_INVALID")
    status, created, _ = await _post(srv, url, _admin(code))
    assert (status, created["data"]["roles"]) == (201, ["admin"])
    status, problem, _ = await _post(srv, url, _admin(code, "second"))  # single use, and a user exists
    assert (status, problem["code"]) == (409, "SVC.SETUP.ALREADY_DONE")
    async with srv.http.post(
        f"{srv.admin}/workspaces/claim-me/setup-code", headers={"Authorization": f"Bearer {ADMIN}"}
    ) as resp:
        assert resp.status == 409 and (await resp.json())["code"] == "SVC.SETUP.CLOSED"


async def test_a_replaced_code_no_longer_works(srv: Running) -> None:
    old = (await srv.register("twice"))["setup_code"]
    async with srv.http.post(
        f"{srv.admin}/workspaces/twice/setup-code", headers={"Authorization": f"Bearer {ADMIN}"}
    ) as resp:
        assert resp.status == 201
        new = (await resp.json())["setup_code"]
    url = f"{srv.api}/twice/_ui/setup"
    assert (await _post(srv, url, _admin(old)))[0] == 403
    assert (await _post(srv, url, _admin(new)))[0] == 201


async def test_setup_is_closed_for_good_once_the_workspace_holds_data(srv: Running) -> None:
    code = (await srv.register("busy"))["setup_code"]
    headers = {**JSON, **srv.auth()}  # a token from an external identity provider
    async with srv.http.post(
        f"{srv.api}/busy{P.removeprefix('/default')}", json=product("D1"), headers=headers
    ) as r:
        assert r.status == 201
    status, problem, _ = await _post(srv, f"{srv.api}/busy/_ui/setup", _admin(code))
    assert (status, problem["code"]) == (409, "SVC.SETUP.CLOSED")
    assert (await srv.register("busy")).get("setup_code") is None  # re-registering hands out none


async def test_login_is_rate_limited_per_username_and_address(srv: Running) -> None:
    code = (await srv.register("guarded"))["setup_code"]
    assert (await _post(srv, f"{srv.api}/guarded/_ui/setup", _admin(code)))[0] == 201
    url = f"{srv.api}/guarded/_ui/login"
    statuses = [(await _post(srv, url, {"username": "root", "password": "guess"}))[0] for _ in range(10)]
    assert statuses == [401] * 10
    status, problem, headers = await _post(
        srv, url, {"username": "root", "password": "correct horse battery"}
    )
    assert (status, problem["code"]) == (429, "SVC.RATE.LIMITED")  # even the right password, until it resets
    assert 1 <= int(headers["Retry-After"]) <= 60
    others = [(await _post(srv, url, {"username": f"u{i}", "password": "x"}))[0] for i in range(25)]
    assert others.count(429) >= 6  # the address's budget of 30 a minute is spent across usernames
