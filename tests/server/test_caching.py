"""The find-by-id read-through cache of entities that declare ``cache: {ttl}``."""

from __future__ import annotations

import asyncio
from typing import Any

from dap.server import caching, state

from .conftest import SHOP, Running, load, running

CACHED = dict(SHOP)
CACHED["shop/review.yaml"] = SHOP["shop/review.yaml"].replace("  expose:", "  cache: {ttl: 1s}\n  expose:")


async def _get(srv: Running, ws: str, path: str) -> tuple[int, Any]:
    async with srv.http.get(f"{srv.api}/{ws}/api/shop/{path}", headers=srv.auth()) as resp:
        return resp.status, await resp.json(content_type=None)


async def _post(srv: Running, ws: str, path: str, body: Any) -> Any:
    async with srv.http.post(f"{srv.api}/{ws}/api/shop/{path}", json=body, headers=srv.auth()) as resp:
        assert resp.status == 201, await resp.text()
        return (await resp.json())["data"]


def test_ttl_is_clamped() -> None:
    assert caching.ttl_seconds(None) is None
    assert caching.ttl_seconds("300s") == 300
    assert caching.ttl_seconds("2h") == caching.MAX_TTL
    assert caching.ttl_seconds("10ms") == caching.MIN_TTL


async def test_read_through_cache(pg_dsn: str) -> None:
    catalog = load(CACHED)
    assert catalog.resources["shop/review"].cache_ttl == 1.0
    assert catalog.resources["shop/product"].cache_ttl is None
    async with running(pg_dsn, catalog) as srv:
        await srv.register("other")
        pool = srv.server.app[state.POOL]
        product = await _post(srv, "default", "product", {"sku": "C1", "title": "t", "price": "1.00"})
        review = await _post(srv, "default", "review", {"product": product["id"], "remarks": [{"text": "a"}]})
        rid = review["id"]
        assert (await _get(srv, "default", f"review/{rid}"))[1]["data"]["remarks"] == [{"text": "a"}]

        # a write behind the server's back is not seen until the TTL runs out: the answer is cached
        async with pool.acquire() as conn:
            await conn.execute("UPDATE shop__review__remarks SET text = 'b'")
        assert (await _get(srv, "default", f"review/{rid}"))[1]["data"]["remarks"] == [{"text": "a"}]
        # another workspace never gets the entry
        assert (await _get(srv, "other", f"review/{rid}"))[0] == 404
        await asyncio.sleep(1.1)
        assert (await _get(srv, "default", f"review/{rid}"))[1]["data"]["remarks"] == [{"text": "b"}]

        # writes through the server invalidate at once
        async with srv.http.patch(
            f"{srv.api}/default/api/shop/review/{rid}", json={"remarks": [{"text": "c"}]}, headers=srv.auth()
        ) as resp:
            assert resp.status == 200
        _, body = await _get(srv, "default", f"review/{rid}")
        assert body["data"]["remarks"] == [{"text": "c"}] and body["data"]["version"] == 2

        # so do on_delete effects on other tables (the review cascades with its product)
        async with srv.http.delete(
            f"{srv.api}/default/api/shop/product/{product['id']}", headers=srv.auth()
        ) as resp:
            assert resp.status == 204
        assert (await _get(srv, "default", f"review/{rid}"))[0] == 404


def test_a_read_racing_a_write_is_not_cached() -> None:
    import uuid

    cache = caching.FindCache()
    key = ("t", uuid.uuid4(), uuid.uuid4())
    epoch = cache.epoch  # a find starts reading ...
    cache.invalidate(key)  # ... a write commits meanwhile ...
    cache.put(key, epoch=epoch, ttl=10, catalog=None, body="old", etag='"1"')  # ... the stale read is dropped
    assert cache.get(key, None) is None
    cache.put(key, epoch=cache.epoch, ttl=10, catalog=None, body="new", etag='"2"')
    assert cache.get(key, None) is not None and cache.get(key, object()) is None  # other catalog: miss
