"""The REST engine over real HTTP and real Postgres: CRUD, list parameters, validation, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap.server import state

from .conftest import SHOP, Running, load, running

JSON = {"Content-Type": "application/json"}  # every JSON endpoint refuses other bodies (415)

pytestmark = pytest.mark.asyncio(loop_scope="module")

P = "/default/api/shop/product"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, max_body_bytes=4096) as r:
        yield r


async def call(
    srv: Running,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    auth: bool = True,
) -> tuple[int, Any, Any]:
    hdrs = {**JSON, **(srv.auth() if auth else {}), **(headers or {})}
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    async with srv.http.request(method, srv.api + path, data=data, headers=hdrs) as resp:
        text = await resp.text()
        payload = json.loads(text) if text else None
        return resp.status, payload, resp.headers


def product(sku: str, **kw: Any) -> dict[str, Any]:
    return {"sku": sku, "title": f"Product {sku}", "price": "9.99", **kw}


async def test_create_find_update_delete(srv: Running) -> None:
    status, body, headers = await call(
        srv,
        "POST",
        P,
        product(
            "A1",
            weight=1.25,
            tags=["x", "y"],
            parts=[{"part": "bolt", "count": 2}],
            supplier_email="s@x.io",
            cost="1.00",
        )
        | {},
    )
    assert status == 422 and body["errors"] == [
        {"path": "cost", "message": "unknown field"}
    ]  # excluded from rest
    status, body, headers = await call(
        srv,
        "POST",
        P,
        product(
            "A1", weight=1.25, tags=["x", "y"], parts=[{"part": "bolt", "count": 2}], supplier_email="s@x.io"
        ),
    )
    assert status == 201, body
    rec = body["data"]
    assert headers["Location"] == f"{P}/{rec['id']}"
    assert rec["price"] == "9.99" and rec["weight"] == "1.250" and rec["qty"] == 0 and rec["active"] is True
    assert rec["supplier_email"] == "****" and "cost" not in rec and rec["code"] == "P"
    assert rec["version"] == 1 and rec["owner"] == "alice" and "docstatus" not in rec
    assert rec["parts"] == [{"part": "bolt", "count": 2}] and rec["tags"] == ["x", "y"]

    status, body, headers = await call(srv, "GET", f"{P}/{rec['id']}")
    assert status == 200 and body["data"] == rec and headers["ETag"] == '"1"'

    status, body, _ = await call(srv, "PATCH", f"{P}/{rec['id']}", {"qty": 5}, headers={"If-Match": '"1"'})
    assert status == 200 and body["data"]["qty"] == 5 and body["data"]["version"] == 2

    status, body, _ = await call(srv, "PATCH", f"{P}/{rec['id']}", {"qty": 6}, headers={"If-Match": '"1"'})
    assert status == 412 and body["code"] == "SVC.VERSION.MISMATCH"
    status, body, _ = await call(srv, "PATCH", f"{P}/{rec['id']}", {"qty": 6}, headers={"If-Match": "soon"})
    assert status == 400

    status, body, _ = await call(srv, "PATCH", f"{P}/{rec['id']}", {"sku": "B1", "code": "Q"})
    assert status == 422
    assert {e["path"] for e in body["errors"]} == {"sku", "code"}  # immutable, read-only

    status, _, _ = await call(srv, "DELETE", f"{P}/{rec['id']}")
    assert status == 204
    status, body, _ = await call(srv, "GET", f"{P}/{rec['id']}")
    assert status == 404 and body["code"] == "SVC.RECORD.NOT_FOUND"
    status, _, _ = await call(srv, "DELETE", f"{P}/{rec['id']}")
    assert status == 404
    status, _, _ = await call(srv, "PATCH", f"{P}/{rec['id']}", {"qty": 1})
    assert status == 404


async def test_validation_lists_every_offending_field(srv: Running) -> None:
    status, body, headers = await call(
        srv,
        "POST",
        P,
        {"sku": 1, "price": 1.555, "color": "pink", "launched": "May", "id": "x", "nope": True},
    )
    assert status == 422
    assert headers["Content-Type"].startswith("application/problem+json")
    assert {e["path"] for e in body["errors"]} == {"sku", "price", "color", "launched", "id", "nope", "title"}
    assert body["type"] == f"urn:dap:error:{body['code']}" and body["status"] == 422


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        pytest.param(b"{", 400, id="truncated"),
        pytest.param(b"[1, 2]", 400, id="array"),
        pytest.param(b"\xff\xfe", 400, id="not-utf8"),
        pytest.param(b"", 400, id="empty"),
        pytest.param(b'{"title": "' + b"x" * 5000 + b'"}', 413, id="too-large"),
    ],
)
async def test_malformed_bodies_never_500(srv: Running, raw: bytes, status: int) -> None:
    got, body, _ = await call(srv, "POST", P, raw=raw)
    assert got == status, body
    assert body["status"] == status


async def test_unique_per_tenant_from_the_constraint(srv: Running) -> None:
    assert (await call(srv, "POST", P, product("U1")))[0] == 201
    status, body, _ = await call(srv, "POST", P, product("U1"))
    assert status == 409 and body["code"] == "SVC.VALIDATE.DUPLICATE"
    assert body["errors"] == [{"path": "sku", "message": "must be unique within the workspace"}]


async def test_expose_controls_reachability(srv: Running) -> None:
    assert (await call(srv, "GET", "/default/api/shop/secret"))[0] == 404  # no expose entry
    assert (await call(srv, "GET", "/default/api/shop/nothing"))[0] == 404
    status, body, _ = await call(srv, "POST", "/default/api/shop/order", {"number": "O-1"})
    assert status == 201
    oid = body["data"]["id"]
    status, body, headers = await call(srv, "DELETE", f"/default/api/shop/order/{oid}")
    assert status == 405 and headers["Allow"] == "GET"
    assert (await call(srv, "PATCH", f"/default/api/shop/order/{oid}", {"number": "x"}))[0] == 405
    assert (await call(srv, "GET", f"{P}/not-a-uuid"))[0] == 404


async def test_entity_routes_leave_underscore_paths_to_their_own_routes(srv: Running) -> None:
    """The entity routes are tried first, and never for a module starting with ``_`` (no module
    can be named so): those paths reach their own routes, or a problem document's 404."""
    status, body, _ = await call(srv, "GET", "/default/api/_approvals")
    assert status == 200 and "data" in body  # the approval inbox, not an entity list
    status, body, headers = await call(srv, "GET", "/default/api/_nothing/here")
    assert status == 404 and headers["Content-Type"].startswith("application/problem+json")
    assert body["status"] == 404
    status, body, _ = await call(srv, "GET", "/default/api/shop/nothing")
    assert status == 404 and body["code"] == "SVC.ENTITY.NOT_FOUND"


async def test_exposed_resources_follow_a_catalog_swap(srv: Running) -> None:
    """The resource a route found is kept per catalog (``requests.routed``): a catalog swapped in
    that no longer exposes an action answers 404/405 at once, and the one swapped back serves it
    again; a refusal is never kept."""
    status, body, _ = await call(srv, "POST", "/default/api/shop/order", {"number": "O-swap"})
    assert status == 201
    path = f"/default/api/shop/order/{body['data']['id']}"
    assert (await call(srv, "GET", path))[0] == 200  # found, and kept for this catalog
    narrowed = SHOP["shop/order.yaml"].replace("actions: [list, find, create]", "actions: [list, create]")
    assert narrowed != SHOP["shop/order.yaml"]
    spec = srv.server.app[state.SPEC]
    previous = spec.swap(load({**SHOP, "shop/order.yaml": narrowed}))
    try:
        status, body, _ = await call(srv, "GET", path)
        assert status == 404 and body["code"] == "SVC.ACTION.NOT_EXPOSED"
        status, body, headers = await call(srv, "GET", "/default/api/shop/order?limit=1")
        assert status == 200
    finally:
        spec.swap(previous)
    assert (await call(srv, "GET", path))[0] == 200
    status, _, headers = await call(srv, "DELETE", path)  # the refusal of another action, as before
    assert status == 405 and headers["Allow"] == "GET"


async def test_lifecycle_and_child_table(srv: Running) -> None:
    status, body, _ = await call(
        srv,
        "POST",
        "/default/api/shop/order",
        {"number": "O-2", "lines": [{"item": "a", "amount": "1.5"}, {"item": "b", "amount": 2}]},
    )
    assert status == 201, body
    rec = body["data"]
    assert rec["docstatus"] == "draft"
    assert rec["lines"] == [{"item": "a", "amount": "1.50"}, {"item": "b", "amount": "2.00"}]
    status, body, _ = await call(srv, "GET", "/default/api/shop/order?docstatus=draft&number=O-2")
    assert status == 200 and [r["lines"] for r in body["data"]] == [rec["lines"]]
    status, body, _ = await call(
        srv, "POST", "/default/api/shop/order", {"number": "O-3", "lines": [{"amount": 1}]}
    )
    assert status == 422 and body["errors"][0]["path"] == "lines"


async def test_list_parameters(srv: Running) -> None:
    for i, (color, price) in enumerate(
        [("red", "1.00"), ("green", "2.50"), ("blue", "10.00"), ("red", "7.25")]
    ):
        body = product(
            f"L{i}", color=color, price=price, qty=i, launched=f"2024-0{i + 1}-01", title=f"List {i}"
        )
        assert (await call(srv, "POST", P, body))[0] == 201

    async def skus(query: str) -> list[str]:
        status, body, _ = await call(srv, "GET", f"{P}?title[like]=List%25&{query}")
        assert status == 200, body
        return [r["sku"] for r in body["data"]]

    assert await skus("sort=price") == ["L0", "L1", "L3", "L2"]  # numeric, not text order
    assert await skus("sort=-price") == ["L2", "L3", "L1", "L0"]
    assert await skus("color=red&sort=qty") == ["L0", "L3"]
    assert await skus("color[neq]=red&sort=qty") == ["L1", "L2"]
    assert await skus("color[in]=green,blue&sort=qty") == ["L1", "L2"]
    assert await skus("color[nin]=green,blue&sort=qty") == ["L0", "L3"]
    assert await skus("price[gt]=2.5&sort=qty") == ["L2", "L3"]
    assert await skus("price[gte]=2.5&sort=qty") == ["L1", "L2", "L3"]
    assert await skus("qty[lt]=1") == ["L0"]
    assert await skus("qty[lte]=1&sort=qty") == ["L0", "L1"]
    assert await skus("launched[between]=2024-02-01,2024-03-01&sort=qty") == ["L1", "L2"]
    assert await skus("title[ilike]=%25list 3") == ["L3"]
    assert await skus("weight[null]&sort=qty") == ["L0", "L1", "L2", "L3"]
    assert await skus("weight[notnull]") == []
    assert await skus("sort=qty&limit=2&offset=1") == ["L1", "L2"]
    assert await skus("owner=alice&sort=qty&limit=1") == ["L0"]
    status, body, _ = await call(srv, "GET", f"{P}?title[like]=List%25&count=true&limit=1&fields=sku,price")
    assert body["total"] == 4 and body["limit"] == 1 and body["offset"] == 0
    assert set(body["data"][0]) == {"sku", "price", "id"}
    status, body, _ = await call(srv, "GET", f"{P}?sku=L0")
    assert "notes" not in body["data"][0]  # excluded from the list surface
    rid = body["data"][0]["id"]
    assert (await call(srv, "GET", f"{P}/{rid}"))[1]["data"]["notes"] is None  # but shown by find
    assert [r["sku"] for r in (await call(srv, "GET", f"{P}?id={rid}"))[1]["data"]] == ["L0"]
    status, body, _ = await call(
        srv, "GET", f"{P}?created_at[gte]=2000-01-01T00:00:00Z&title[like]=List%25&count=true"
    )
    assert body["total"] == 4
    status, body, _ = await call(srv, "GET", f"{P}?qty=abc")
    assert status == 400 and body["errors"][0]["path"] == "qty"
    assert (await call(srv, "GET", f"{P}?limit=5000"))[0] == 400
    status, body, _ = await call(srv, "GET", P)
    assert body["limit"] == 50 and body["total"] is None


async def test_auth_over_http(srv: Running) -> None:
    status, body, headers = await call(srv, "GET", P, auth=False)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    status, body, _ = await call(srv, "GET", P, auth=False, headers=srv.auth(workspace="elsewhere"))
    assert status == 401 and body["code"] == "SVC.AUTH.WRONG_WORKSPACE"
    status, body, _ = await call(srv, "GET", P, auth=False, headers=srv.auth(workspace="default"))
    assert status == 200
    status, body, _ = await call(srv, "GET", "/nowhere/api/shop/product")
    assert status == 404 and body["code"] == "SVC.WORKSPACE.NOT_FOUND"


async def test_cors(srv: Running) -> None:
    preflight = {"Origin": "http://ui.example", "Access-Control-Request-Method": "PATCH"}
    async with srv.http.options(srv.api + P, headers=preflight) as resp:
        assert resp.status == 204
        assert resp.headers["Access-Control-Allow-Origin"] == "http://ui.example"
        assert "PATCH" in resp.headers["Access-Control-Allow-Methods"]
    async with srv.http.options(srv.api + P, headers={**preflight, "Origin": "http://evil.example"}) as resp:
        assert resp.status == 403 and "Access-Control-Allow-Origin" not in resp.headers
    async with srv.http.get(srv.api + P, headers={**srv.auth(), "Origin": "http://ui.example"}) as resp:
        assert resp.headers["Access-Control-Allow-Origin"] == "http://ui.example"
    async with srv.http.get(srv.api + P, headers={**srv.auth(), "Origin": "http://evil.example"}) as resp:
        assert "Access-Control-Allow-Origin" not in resp.headers


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"sku": "N1", "title": "\\ud800", "price": "1"}', id="lone-surrogate"),
        pytest.param(b'{"sku": "N2", "title": "t", "price": 1e400}', id="huge-money"),
        pytest.param(b'{"sku": "N3", "title": "t", "price": "1", "rating": 1e400}', id="infinite-number"),
        pytest.param(
            b'{"sku": "N4", "title": "t", "price": "1", "attrs": {"a": "\\u0000"}}', id="nul-in-json"
        ),
        pytest.param(
            b'{"sku": "N5", "title": "t", "price": "1", "qty": 123456789012345678901234567890}', id="huge-int"
        ),
        pytest.param(b'{"sku": "N6", "title": "t", "price": "1", "launched": "2024-02-30"}', id="bad-date"),
        pytest.param(
            b'{"sku": "N7", "title": "t", "price": "1", "parts": [{"part": 5}]}', id="bad-child-row"
        ),
    ],
)
async def test_hostile_values_are_client_errors(srv: Running, raw: bytes) -> None:
    status, body, _ = await call(srv, "POST", P, raw=raw)
    assert 400 <= status < 500, body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("title[like]=%00", 400, id="nul-like"),
        pytest.param("title=%ED%A0%80", 200, id="bad-utf8-is-replaced-by-aiohttp"),
        pytest.param("price[gt]=1e400", 400, id="huge-decimal"),
        pytest.param("launched=2024-02-30", 400, id="bad-date"),
        pytest.param("id=zzz", 400, id="bad-id"),
    ],
)
async def test_hostile_queries_are_client_errors(srv: Running, query: str, expected: int) -> None:
    status, body, _ = await call(srv, "GET", f"{P}?{query}")
    assert status == expected, body


async def test_document_lifecycle(srv: Running) -> None:
    inv = "/default/api/shop/invoice"
    status, body, _ = await call(srv, "POST", inv, {"amount": "10.00"})
    assert status == 201 and body["data"]["docstatus"] == "draft"
    rid = body["data"]["id"]
    assert (await call(srv, "POST", f"{inv}/{rid}/cancel"))[1]["code"] == "SVC.DOC.CANCEL_NOT_SUBMITTED"
    assert (await call(srv, "POST", f"{inv}/{rid}/submit", headers={"If-Match": '"7"'}))[0] == 412
    status, body, headers = await call(srv, "POST", f"{inv}/{rid}/submit")
    assert status == 200 and body["data"]["docstatus"] == "submitted" and headers["ETag"] == '"2"'
    status, body, _ = await call(srv, "POST", f"{inv}/{rid}/submit")
    assert status == 409 and body["code"] == "SVC.DOC.ALREADY_SUBMITTED"
    status, body, _ = await call(srv, "PATCH", f"{inv}/{rid}", {"amount": "11.00"})
    assert status == 409 and body["code"] == "SVC.DOC.UPDATE_NOT_DRAFT"
    status, body, _ = await call(srv, "DELETE", f"{inv}/{rid}")
    assert status == 409 and body["code"] == "SVC.DOC.DELETE_NOT_DRAFT"
    status, body, _ = await call(srv, "GET", f"{inv}?docstatus=submitted&count=true")
    assert body["total"] == 1
    assert (await call(srv, "POST", f"{inv}/{rid}/cancel"))[1]["data"]["docstatus"] == "cancelled"
    assert (await call(srv, "POST", f"{inv}/{rid}/cancel"))[1]["code"] == "SVC.DOC.ALREADY_CANCELLED"
    assert (await call(srv, "POST", f"{inv}/{rid}/submit"))[1]["code"] == "SVC.DOC.SUBMIT_NOT_DRAFT"
    assert (await call(srv, "DELETE", f"{inv}/{rid}"))[1]["code"] == "SVC.DOC.DELETE_NOT_DRAFT"  # stays
    assert (await call(srv, "POST", f"{inv}/{rid}/remind"))[0] == 501  # declared, needs the bridge
    assert (await call(srv, "POST", f"{inv}/{rid}/fly"))[0] == 404
    assert (await call(srv, "POST", f"/default/api/shop/order/{rid}/submit"))[0] == 405  # no update exposed
    assert (await call(srv, "POST", f"{P}/{rid}/submit"))[0] == 404  # no lifecycle


async def test_relations_must_point_into_the_workspace(srv: Running) -> None:
    status, body, _ = await call(srv, "POST", P, product("R1"))
    pid = body["data"]["id"]
    status, body, _ = await call(srv, "POST", "/default/api/shop/order", {"number": "O-9", "product": pid})
    assert status == 201 and body["data"]["product"] == pid
    ghost = "00000000-0000-4000-8000-000000000000"
    status, body, _ = await call(srv, "POST", "/default/api/shop/order", {"number": "O-10", "product": ghost})
    assert status == 422 and body["code"] == "SVC.VALIDATE.RELATION_NOT_FOUND"
    assert body["errors"] == [{"path": "product", "message": "no such related record in this workspace"}]


async def test_on_delete_restrict_cascade_set_null(srv: Running) -> None:
    reviews = "/default/api/shop/review"
    target = (await call(srv, "POST", P, product("D1")))[1]["data"]["id"]
    other = (await call(srv, "POST", P, product("D2")))[1]["data"]["id"]
    cascaded = (await call(srv, "POST", reviews, {"product": target, "remarks": [{"text": "ok"}]}))[1][
        "data"
    ]["id"]
    cleared = (await call(srv, "POST", reviews, {"product": other, "related": target}))[1]["data"]["id"]
    kept = (await call(srv, "POST", reviews, {"product": other}))[1]["data"]["id"]
    status, _, _ = await call(srv, "POST", "/default/api/shop/order", {"number": "O-R", "product": other})
    assert status == 201

    status, body, _ = await call(srv, "DELETE", f"{P}/{other}")  # an order refers to it: restrict
    assert status == 409 and body["code"] == "SVC.REF.DELETE_BLOCKED"
    assert body["errors"] == [{"path": "shop/order.product", "message": "records refer to this one"}]
    assert (await call(srv, "GET", f"{reviews}/{kept}"))[0] == 200  # nothing cascaded on refusal

    remarks = "SELECT count(*) FROM shop__review__remarks WHERE parent_id = $1"
    async with srv.server.app[state.POOL].acquire() as conn:
        assert await conn.fetchval(remarks, cascaded) == 1
    assert (await call(srv, "DELETE", f"{P}/{target}"))[0] == 204
    assert (await call(srv, "GET", f"{reviews}/{cascaded}"))[0] == 404
    async with srv.server.app[state.POOL].acquire() as conn:  # its child rows went with it
        assert (
            await conn.fetchval("SELECT count(*) FROM shop__review__remarks WHERE parent_id = $1", cascaded)
            == 0
        )
    status, body, _ = await call(srv, "GET", f"{reviews}/{cleared}")
    assert status == 200 and body["data"]["related"] is None and body["data"]["version"] == 2


async def test_extension_namespace(srv: Running) -> None:
    status, body, _ = await call(srv, "POST", P, product("E1", eco={"co2": "1.25"}))
    assert status == 422 and body["errors"] == [{"path": "eco.co2", "message": "at most 1 decimal places"}]
    status, body, _ = await call(srv, "POST", P, product("E1", eco="green"))
    assert status == 422 and body["errors"][0]["path"] == "eco"
    status, body, _ = await call(srv, "POST", P, product("E1", eco={"co2": "1.5", "supplier_code": "X9"}))
    assert status == 201 and body["data"]["eco"] == {"co2": "1.5", "supplier_code": "****"}
    rid = body["data"]["id"]
    status, body, _ = await call(srv, "PATCH", f"{P}/{rid}", {"eco": {"co2": 2}})
    assert status == 200 and body["data"]["eco"] == {"co2": "2.0"}  # replaced as a whole
    assert (await call(srv, "POST", P, product("E2")))[1]["data"]["eco"] is None
    status, body, _ = await call(srv, "GET", f"{P}?sku=E1&fields=eco,sku")
    assert status == 200 and body["data"] == [{"sku": "E1", "eco": {"co2": "2.0"}, "id": rid}]


async def test_logs_never_carry_values(srv: Running, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.DEBUG, logger="dap.server"):
        status, _, _ = await call(srv, "POST", P, product("M1", supplier_email="hidden@secret.example"))
        assert status == 201
        await call(srv, "POST", P, product("M2", supplier_email=5))  # a 422 with the field named
    assert any(r.getMessage() == "request" for r in caplog.records)
    text = " ".join(f"{r.getMessage()} {getattr(r, 'ctx', '')}" for r in caplog.records)
    assert "hidden@secret.example" not in text
