"""Fixtures of the server tests: a small spec covering every field type, and running servers.

``running`` boots the real server (pool, migrations, both listeners on ephemeral loopback
ports) against a database of the embedded Postgres, and stops it afterwards, so the tests talk
real HTTP to real Postgres.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import jwt
import pytest
import pytest_asyncio

from dap import config
from dap.server import options
from dap.server.catalog import Catalog
from dap.server.events import channels, dispatcher, measures, outbox
from dap.server.storage import db
from dap.server.web import app
from tests.conftest import new_database

# 64 bytes and more: PyJWT warns below the key length of the HMAC (HS512 is tried in test_auth)
SECRET = "test-secret-of-at-least-sixty-four-bytes-so-that-hs512-is-quiet-too!"
ISSUER = "svc"
ORIGIN = "http://ui.example"
ADMIN = "admin-secret-for-tests"

SHOP = {
    "shop/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: shop}
spec: {title: Shop}
""",
    "shop/product.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: product, module: shop}
spec:
  title: Product
  fields:
    - {name: sku, type: string, required: true, unique: true, immutable: true}
    - {name: title, type: string, required: true, description: Shown on the shelf label}
    - {name: description, type: text}
    - {name: qty, type: integer, default: 0}
    - {name: weight, type: decimal, precision: 10, scale: 3}
    - {name: price, type: money, currency: EUR, scale: 2, required: true}
    - {name: discount, type: percent, scale: 2}
    - {name: rating, type: number}
    - {name: active, type: boolean, default: true}
    - {name: color, type: enum, enum_values: [red, green, blue]}
    - name: size
      type: string
      multiple: false
      options: [{value: s, label: Small}, {value: m, label: Medium}, {value: l, label: Large}]
    - {name: launched, type: date}
    - {name: last_sold, type: datetime}
    - {name: opens, type: time}
    - {name: batch, type: uuid}
    - {name: attrs, type: json}
    - {name: tags, type: string, multiple: true}
    - {name: supplier_email, type: string, masked: true}
    - {name: cost, type: money, exclude: [rest]}
    - {name: notes, type: text, exclude: [list]}
    - {name: code, type: string, read_only: true, default: P}
    - name: parts
      type: child
      child:
        storage: jsonb
        fields:
          - {name: part, type: string, required: true}
          - {name: count, type: integer}
  expose:
    - type: rest
""",
    "shop/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: shop}
spec:
  title: Order
  lifecycle: true
  fields:
    - {name: number, type: string, required: true}
    - {name: product, type: relation, relation: {entity: shop/product, display_field: title}}
    - name: lines
      type: child
      child:
        storage: table
        fields:
          - {name: item, type: string, required: true}
          - {name: amount, type: money, scale: 2}
  expose:
    - type: rest
      actions: [list, find, create]
""",
    "shop/invoice.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: invoice, module: shop}
spec:
  lifecycle: true
  fields:
    - {name: amount, type: money}
  actions:
    - {name: remind, description: Send a reminder}
  expose:
    - type: rest
""",
    "shop/review.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: review, module: shop}
spec:
  fields:
    - {name: product, type: relation, relation: {entity: shop/product, on_delete: cascade}}
    - {name: related, type: relation, relation: {entity: shop/product, on_delete: set_null}}
    - name: remarks
      type: child
      child:
        storage: table
        fields:
          - {name: text, type: string}
  expose:
    - type: rest
""",
    "shop/product_eco.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: product_eco, module: shop}
spec:
  extends: {target: shop/product, namespace: eco}
  fields:
    - {name: co2, type: decimal, scale: 1}
    - {name: supplier_code, type: string, masked: true}
""",
    "shop/secret.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: secret, module: shop}
spec:
  fields:
    - {name: value, type: string}
""",
    "shop/ui.yaml": """
apiVersion: dap.io/v1
kind: Page
metadata: {name: products, module: shop}
spec:
  title: Products
  route: /products
---
apiVersion: dap.io/v1
kind: App
metadata: {name: store, module: shop}
spec:
  title: Store
  home: products
  pages: [products]
""",
}


def load(files: Mapping[str, str] = SHOP) -> Catalog:
    return Catalog.from_spec(config.load_files(dict(files)))


def token(
    *,
    sub: str = "u-1",
    username: str = "alice",
    workspace: str | None = None,
    secret: str = SECRET,
    issuer: str = ISSUER,
    ttl: int = 6 * 3600,  # module-level tokens are made at collection; the suite runs long
    **extra: Any,
) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub,
        "username": username,
        "roles": ["admin"],
        "iss": issuer,
        "iat": now,
        "exp": now + ttl,
        **extra,
    }
    if workspace is not None:
        claims["workspace"] = workspace
    return jwt.encode(claims, secret, algorithm="HS256")


def serve_options(dsn: str, **overrides: Any) -> options.ServeOptions:
    raw: dict[str, Any] = {
        "dsn": dsn,
        "addr": "127.0.0.1:0",
        "metrics_addr": "127.0.0.1:0",
        "jwt_secret": SECRET,
        "cors_origins": [ORIGIN],
        "admin_secret": ADMIN,
        "pool_size": 4,
    }
    raw.update(overrides)
    return options.check(**raw)


@dataclass
class Running:
    server: app.Server
    http: aiohttp.ClientSession

    @property
    def api(self) -> str:
        return self.server.urls["api"]

    @property
    def admin(self) -> str:
        return self.server.urls["admin"]

    def auth(self, workspace: str | None = None, **kw: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(workspace=workspace, **kw)}"}

    async def register(self, slug: str, name: str = "") -> dict[str, Any]:
        """Register ``slug`` on the admin listener; its answer (with the setup code while open)."""
        async with self.http.post(
            f"{self.admin}/workspaces",
            json={"slug": slug, "name": name or slug},
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as resp:
            assert resp.status == 201, await resp.text()
            answer: dict[str, Any] = await resp.json()
            return answer


@contextlib.asynccontextmanager
async def running(dsn: str, catalog: Catalog | None = None, **overrides: Any) -> AsyncIterator[Running]:
    server = await app.create_server(serve_options(dsn, **overrides), catalog or load())
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Running(server, http)
    finally:
        await server.stop()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load()


async def fresh_database_async(server_dsn: str) -> tuple[str, str]:
    """A new empty database on the test server (for tests that drop it themselves)."""
    return await new_database(server_dsn)


async def events_of(dsn: str, record_id: str) -> list[dict[str, Any]]:
    """The outbox events of one record, oldest first: ``event``, ``version`` and the payload's keys."""
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT event, version, payload FROM dap.outbox WHERE record_id = $1 ORDER BY id",
            uuid.UUID(record_id),
        )
    finally:
        await conn.close()
    return [{"event": r["event"], "version": r["version"], **json.loads(r["payload"])} for r in found]


Logs = list[list[str]]  # the statements each pooled connection sent, one list per connection


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def logged_pool(pg_dsn: str) -> AsyncIterator[tuple[Any, Logs]]:
    """A pool of three connections, on a database with the outbox, whose every statement is logged
    (the dispatcher's tests count what a round sends)."""
    pool = await db.open_pool(pg_dsn, 3)
    logs: Logs = []
    try:
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        for conn in held:
            mine: list[str] = []
            logs.append(mine)
            conn.add_query_logger(lambda q, mine=mine: mine.append(q.query.strip()))
            await outbox.ensure_schema(conn)
        for conn in held:
            await pool.release(conn)
        yield pool, logs
    finally:
        await pool.close()


def dispatcher_for(pool: Any, dsn: str, tenant: uuid.UUID, **settings: Any) -> dispatcher.Dispatcher:
    """A dispatcher of ``tenant``'s events only, with no entity declared (nothing to deliver: each
    event is settled as claimed); ``settings`` as ``dispatcher.Settings`` takes them, a poll of
    30 s unless given."""
    settings.setdefault("poll", 30.0)
    return dispatcher.Dispatcher(
        pool,
        dsn,
        dict,
        channels.Channels(),
        measures.Counters(),
        dispatcher.Settings(tenants=frozenset({tenant}), **settings),
    )
