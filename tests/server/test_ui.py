"""UI metadata, first-admin setup, login and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from dap.server.access import accounts

from .conftest import SECRET, Running, running

JSON = {"Content-Type": "application/json"}  # every JSON endpoint refuses other bodies (415)


async def _get(srv: Running, path: str) -> tuple[int, Any]:
    async with srv.http.get(srv.api + path) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_meta_payloads(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        status, body = await _get(srv, "/default/_ui/_meta/apps")
        assert status == 200
        assert body["data"] == [
            {
                "name": "shop/store",
                "module": "shop",
                "app": "store",
                "title": "Store",
                "description": None,
                "access": "private",
                "icon": None,
                "home": "shop/products",
                "pages": ["shop/products"],
            }
        ]
        status, body = await _get(srv, "/default/_ui/_meta/apps/shop/store")
        assert status == 200 and body["data"]["pages"][0]["name"] == "shop/products"
        assert body["data"]["pages"][0]["route"] == "/products"
        assert (await _get(srv, "/default/_ui/_meta/apps/shop/nope"))[0] == 404
        status, body = await _get(srv, "/default/_ui/_meta/entities/shop/product")
        assert status == 200
        meta = body["data"]
        assert meta["rest"] == ["create", "delete", "find", "list", "update"]
        fields = {f["name"]: f for f in meta["fields"]}
        assert fields["title"]["caption"] == "Title" and fields["title"]["help"] == "Shown on the shelf label"
        assert fields["size"]["options"] == [
            {"value": "s", "label": "Small"},
            {"value": "m", "label": "Medium"},
            {"value": "l", "label": "Large"},
        ]
        assert fields["color"]["options"][0] == {"value": "red", "label": "Red"}
        assert fields["price"]["type"] == "money" and fields["price"]["scale"] == 2
        assert fields["parts"]["child"]["fields"][0]["name"] == "part"
        assert fields["code"]["read_only"] is True and fields["sku"]["immutable"] is True
        assert meta["extensions"][0]["namespace"] == "eco"
        assert [f["name"] for f in meta["extensions"][0]["fields"]] == ["co2", "supplier_code"]
        assert (await _get(srv, "/unknown/_ui/_meta/apps"))[0] == 404


async def test_setup_then_login(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        code = (await srv.register("fresh"))["setup_code"]
        url = f"{srv.api}/fresh/_ui"
        short = {"username": "root", "password": "short", "setup_code": code}
        async with srv.http.post(f"{url}/setup", json=short) as resp:
            assert resp.status == 422
        admin = {
            "username": "root",
            "password": "correct horse",
            "email": "root@example.com",
            "setup_code": code,
        }
        async with srv.http.post(f"{url}/setup", json=admin) as resp:
            assert resp.status == 201
            created = (await resp.json())["data"]
            assert created["roles"] == ["admin"] and created["token"]
        async with srv.http.post(f"{url}/setup", json={**admin, "username": "other"}) as resp:
            assert resp.status == 409 and (await resp.json())["code"] == "SVC.SETUP.ALREADY_DONE"
        async with srv.http.post(
            f"{url}/login", json={"username": "root", "password": "wrong password"}
        ) as resp:
            assert resp.status == 401
        async with srv.http.post(
            f"{url}/login", json={"username": "ghost", "password": "wrong password"}
        ) as resp:
            assert resp.status == 401
        async with srv.http.post(
            f"{url}/login", json={"username": "root", "password": "correct horse"}
        ) as resp:
            assert resp.status == 200
            issued = (await resp.json())["token"]
        async with srv.http.get(
            f"{srv.api}/fresh/api/shop/product", headers={"Authorization": f"Bearer {issued}"}
        ) as resp:
            assert resp.status == 200
        # the token names its workspace: it does not open another one
        async with srv.http.get(
            f"{srv.api}/default/api/shop/product", headers={"Authorization": f"Bearer {issued}"}
        ) as resp:
            assert resp.status == 401
        async with srv.http.post(f"{srv.api}/default/_ui/login", data=b"{", headers=JSON) as resp:
            assert resp.status == 400


def test_password_hashing() -> None:
    stored = accounts.hash_password("s3cret-pass")
    assert stored.startswith("scrypt$") and "s3cret-pass" not in stored
    assert accounts.check_password("s3cret-pass", stored)
    assert not accounts.check_password("other", stored)
    assert not accounts.check_password("s3cret-pass", "plain")
    assert accounts.hash_password("x") != accounts.hash_password("x")  # salted


async def test_openapi_describes_exactly_what_is_exposed(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        status, doc = await _get(srv, "/default/api/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": "/default"}]
    assert set(doc["paths"]) == {
        "/api/_notifications",  # every workspace's in-app notifications
        "/api/_notifications/read",
        "/api/shop/product",
        "/api/shop/product/{id}",
        "/api/shop/order",
        "/api/shop/order/{id}",
        "/api/shop/invoice",
        "/api/shop/invoice/{id}",
        "/api/shop/invoice/{id}/submit",
        "/api/shop/invoice/{id}/cancel",
        "/api/shop/review",
        "/api/shop/review/{id}",
        *(f"/api/shop/{e}/{{id}}/_audit" for e in ("product", "order", "invoice", "review")),
    }
    assert set(doc["paths"]["/api/shop/order/{id}"]) == {"parameters", "get"}  # find only
    assert set(doc["paths"]["/api/shop/order"]) == {"get", "post"}
    product = doc["components"]["schemas"]["shop.product"]["properties"]
    assert product["price"]["format"] == "decimal" and "cost" not in product
    assert product["eco"]["anyOf"][0]["properties"]["co2"]["format"] == "decimal"
    create = doc["components"]["schemas"]["shop.product.create"]
    assert set(create["required"]) == {"sku", "title", "price"} and "code" not in create["properties"]
    assert "sku" not in doc["components"]["schemas"]["shop.product.update"]["properties"]  # immutable
    params = {p["name"] for p in doc["paths"]["/api/shop/product"]["get"]["parameters"]}
    assert {
        "limit",
        "offset",
        "sort",
        "count",
        "fields",
        "price[between]",
        "title[ilike]",
        "created_at[gte]",
    } <= params
    assert "supplier_email" not in params and "docstatus" not in params
    order_params = {p["name"] for p in doc["paths"]["/api/shop/order"]["get"]["parameters"]}
    assert "docstatus[in]" in order_params
    assert SECRET not in str(doc)


async def test_spec_swap_replaces_routes_atomically(pg_dsn: str) -> None:
    from dap.server import state
    from dap.server.web import app

    from .conftest import SHOP, load

    async with running(pg_dsn) as srv:
        url = f"{srv.api}/default/api/shop/product"
        async with srv.http.get(url, headers=srv.auth()) as resp:
            assert resp.status == 200
        hidden = dict(SHOP)
        hidden["shop/product.yaml"] = SHOP["shop/product.yaml"].replace("  expose:\n    - type: rest\n", "")
        new = load(hidden)
        await app.prepare_database(srv.server.app[state.POOL], new)  # migrate first, then swap
        old = srv.server.app[state.SPEC].swap(new)
        assert old.resource("shop", "product") is not None
        async with srv.http.get(url, headers=srv.auth()) as resp:
            assert resp.status == 404
