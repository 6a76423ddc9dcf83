"""Two workspaces on one database: nothing crosses between them."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Running, running


async def _call(srv: Running, ws: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    url = f"{srv.api}/{ws}/api/shop/product{path}"
    async with srv.http.request(method, url, json=body, headers=srv.auth(workspace=ws)) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text else None


async def test_workspaces_never_see_each_other(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        await srv.register("acme")
        await srv.register("globex")
        ids: dict[str, str] = {}
        for ws in ("acme", "globex"):
            # the same unique sku in both tenants is fine
            status, body = await _call(
                srv, ws, "POST", "", {"sku": "SAME", "title": ws, "price": "1.00", "qty": 1}
            )
            assert status == 201, body
            ids[ws] = body["data"]["id"]
        status, body = await _call(
            srv, "acme", "POST", "", {"sku": "SAME", "title": "again", "price": "1.00"}
        )
        assert status == 409  # but not twice in one tenant

        for ws, other in (("acme", "globex"), ("globex", "acme")):
            status, body = await _call(srv, ws, "GET", "?count=true")
            assert [r["title"] for r in body["data"]] == [ws] and body["total"] == 1
            status, body = await _call(srv, ws, "GET", f"?id={ids[other]}")
            assert body["data"] == []
            status, body = await _call(srv, ws, "GET", "?sku=SAME&title=" + other)
            assert body["data"] == []
            assert (await _call(srv, ws, "GET", f"/{ids[other]}"))[0] == 404
            assert (await _call(srv, ws, "PATCH", f"/{ids[other]}", {"qty": 99}))[0] == 404
            assert (await _call(srv, ws, "DELETE", f"/{ids[other]}"))[0] == 404

        # the other tenant's record is untouched by those attempts
        status, body = await _call(srv, "globex", "GET", f"/{ids['globex']}")
        assert status == 200 and body["data"]["qty"] == 1 and body["data"]["version"] == 1

        # a relation cannot point at another tenant's record
        url = f"{srv.api}/acme/api/shop/order"
        async with srv.http.post(
            url, json={"number": "X", "product": ids["globex"]}, headers=srv.auth()
        ) as resp:
            assert resp.status == 422
        async with srv.http.post(
            url, json={"number": "Y", "product": ids["acme"]}, headers=srv.auth()
        ) as resp:
            assert resp.status == 201

        # a token for one workspace does not open another
        url = f"{srv.api}/globex/api/shop/product"
        async with srv.http.get(url, headers=srv.auth(workspace="acme")) as resp:
            assert resp.status == 401
