"""The admin listener: metrics, health, and the /workspaces registry endpoints."""

from __future__ import annotations

import asyncpg

from dap.server import state
from dap.server.storage import workspaces

from .conftest import ADMIN, ORIGIN, fresh_database_async, running

BEARER = {"Authorization": f"Bearer {ADMIN}"}


async def test_workspace_registry_endpoints(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        admin = srv.admin
        async with srv.http.get(f"{admin}/workspaces") as resp:
            assert resp.status == 401
        async with srv.http.get(f"{admin}/workspaces", headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401
        async with srv.http.post(
            f"{admin}/workspaces", json={"slug": "new-one", "name": "New"}, headers=BEARER
        ) as resp:
            assert resp.status == 201
            answer = await resp.json()
            code = answer.pop("setup_code")
            assert answer == {
                "slug": "new-one",
                "created": True,
                "name": "New",
                "setup_code_expires_in": 86400,
            }
            assert len(code) >= 24  # 18 random bytes, base64url
        # usable at once: meta answers 200 right after registering
        async with srv.http.get(f"{srv.api}/new-one/_ui/_meta/apps") as resp:
            assert resp.status == 200
        async with srv.http.post(
            f"{admin}/workspaces", json={"slug": "new-one", "name": "Renamed"}, headers=BEARER
        ) as resp:
            assert (await resp.json())["created"] is False
        async with srv.http.get(f"{admin}/workspaces", headers=BEARER) as resp:
            listed = {w["slug"]: w["name"] for w in (await resp.json())["data"]}
            assert listed == {"default": "Default", "new-one": "Renamed"}
        for bad in ("Upper", "two--dashes", "api", "_ui", "-lead", ""):
            async with srv.http.post(f"{admin}/workspaces", json={"slug": bad}, headers=BEARER) as resp:
                assert resp.status == 422, bad

        # data survives a soft delete and comes back with the slug
        status_url = f"{srv.api}/new-one/api/shop/product"
        body = {"sku": "K1", "title": "Kept", "price": "2.00"}
        async with srv.http.post(status_url, json=body, headers=srv.auth()) as resp:
            assert resp.status == 201
        async with srv.http.delete(f"{admin}/workspaces/new-one", headers=BEARER) as resp:
            assert resp.status == 204
        async with srv.http.get(status_url, headers=srv.auth()) as resp:
            assert resp.status == 404
        async with srv.http.delete(f"{admin}/workspaces/default", headers=BEARER) as resp:
            assert resp.status == 409
        async with srv.http.delete(f"{admin}/workspaces/never", headers=BEARER) as resp:
            assert resp.status == 404
        async with srv.http.post(f"{admin}/workspaces", json={"slug": "new-one"}, headers=BEARER) as resp:
            assert (await resp.json())["created"] is True
        async with srv.http.get(status_url, headers=srv.auth()) as resp:
            assert [r["sku"] for r in (await resp.json())["data"]] == ["K1"]


async def test_workspaces_absent_without_secret_and_default_reseeded(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await workspaces.ensure_schema(conn)
        await conn.execute("UPDATE dap.workspaces SET deleted_at = now() WHERE slug = 'default'")
    finally:
        await conn.close()
    async with running(pg_dsn, admin_secret=None) as srv:
        async with srv.http.get(f"{srv.admin}/workspaces", headers=BEARER) as resp:
            assert resp.status == 404
        async with srv.http.post(f"{srv.admin}/workspaces", json={"slug": "x"}, headers=BEARER) as resp:
            assert resp.status in (404, 405)
        async with srv.http.get(f"{srv.api}/default/_ui/_meta/apps") as resp:
            assert resp.status == 200  # re-seeded at boot


async def test_metrics_and_health(pg_server_dsn: str) -> None:
    name, dsn = await fresh_database_async(pg_server_dsn)
    async with running(dsn) as srv:
        async with srv.http.get(f"{srv.api}/default/api/shop/product", headers=srv.auth()) as resp:
            assert resp.status == 200
        async with srv.http.get(f"{srv.api}/default/api/shop/product/123") as resp:
            assert resp.status == 401
        async with srv.http.get(f"{srv.admin}/metrics") as resp:
            text = await resp.text()
        assert (
            'dap_http_requests_total{method="GET",route="/{ws}/api/{module}/{entity}",status_class="2xx",'
            'workspace="default"} 1.0' in text
        )
        assert "dap_http_request_duration_seconds_bucket{" in text
        assert 'status_class="4xx"' in text
        assert "dap_db_pool_max_connections 4.0" in text
        async with srv.http.get(f"{srv.admin}/health") as resp:
            body = await resp.json()
            assert resp.status == 200 and body["status"] == "ok" and body["reasons"] == []

        async def stale() -> str | None:
            return "artifact is stale"

        srv.server.app[state.HEALTH_CHECKS].append(stale)  # a host adds its own check after start
        async with srv.http.get(f"{srv.admin}/health") as resp:
            assert resp.status == 503 and (await resp.json())["reasons"] == ["artifact is stale"]
        srv.server.app[state.HEALTH_CHECKS].remove(stale)
        # Postgres goes away: the pool's connections die and health says so
        admin_conn = await asyncpg.connect(pg_server_dsn)
        try:
            await admin_conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        finally:
            await admin_conn.close()
        async with srv.http.get(f"{srv.admin}/health") as resp:
            body = await resp.json()
            assert resp.status == 503 and body["status"] == "unhealthy" and body["reasons"]
            assert "checked_at" in body


async def test_the_front_answers_what_the_router_refuses_and_counts_it(pg_server_dsn: str) -> None:
    """The request id, CORS, problem documents and metrics run in front of the application
    (``web.app._front``), not as an aiohttp middleware: what the router refuses before any handler
    -- an unknown path, a method no route takes -- still gets all of them, and a preflight, which
    no handler answers, is still counted under its route."""
    _, dsn = await fresh_database_async(pg_server_dsn)
    async with running(dsn) as srv:
        async with srv.http.get(
            f"{srv.api}/no/such/path/anywhere/at/all", headers={"X-Request-Id": "r-27"}
        ) as resp:
            assert resp.status == 404 and resp.content_type == "application/problem+json"
            assert resp.headers["X-Request-Id"] == "r-27"
        async with srv.http.put(f"{srv.api}/default/_ui/setup", headers={"Origin": ORIGIN}) as resp:
            assert resp.status == 405 and resp.content_type == "application/problem+json"
            assert resp.headers["Access-Control-Allow-Origin"] == ORIGIN
            assert len(resp.headers["X-Request-Id"]) == 32  # made: none was given
        preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "PATCH"}
        async with srv.http.options(f"{srv.api}/default/api/shop/product/1", headers=preflight) as resp:
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == ORIGIN
        async with srv.http.get(f"{srv.admin}/metrics") as resp:
            text = await resp.text()
        for series in (
            'method="GET",route="unmatched",status_class="4xx",workspace="_none"} 1.0',
            'method="PUT",route="unmatched",status_class="4xx",workspace="_none"} 1.0',
            'method="OPTIONS",route="/{ws}/api/{module}/{entity}/{id}",status_class="2xx",'
            'workspace="_none"} 1.0',
        ):
            assert f"dap_http_requests_total{{{series}" in text, series


async def test_graceful_stop_finishes_in_flight_requests(pg_dsn: str) -> None:
    import asyncio

    import aiohttp
    from aiohttp import web

    from dap.server import state
    from dap.server.web import app

    from .conftest import load, serve_options

    server = await app.create_server(serve_options(pg_dsn), load())

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)
        return web.Response(text="done")

    server.app.router.add_get("/slow", slow)
    await server.start()
    async with aiohttp.ClientSession() as http:
        pending = asyncio.create_task(http.get(server.urls["api"] + "/slow"))
        await asyncio.sleep(0.1)
        await server.stop()
        resp = await pending
        assert resp.status == 200 and await resp.text() == "done"
    pool = server.app[state.POOL]
    assert pool.is_closing()
