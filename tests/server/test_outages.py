"""Postgres going away under a running server, through a relay that breaks real connections.

What a client must be told: 503 with ``Retry-After`` while Postgres is unreachable (nothing was
changed); the truth about a write whose commit happened (201 when the commit's answer arrived,
503 "outcome unknown" when it did not); and that repeating a create with its ``Idempotency-Key``
never writes twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from .conftest import Running, running
from .pgproxy import PgProxy

pytestmark = pytest.mark.asyncio(loop_scope="module")

P = "/default/api/shop/product"
JOINED_INSERT = b'WITH w AS (INSERT INTO "shop__product"'  # a create's row and event, one statement


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(pg_dsn: str) -> AsyncIterator[PgProxy]:
    relay = PgProxy(pg_dsn)
    await relay.start()
    yield relay
    await relay.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(proxy: PgProxy) -> AsyncIterator[Running]:
    async with running(proxy.dsn, pool_size=2) as r:
        yield r


async def post(srv: Running, body: dict[str, Any], path: str = P, **headers: str) -> tuple[int, Any, Any]:
    hdrs = {"Content-Type": "application/json", **srv.auth(), **headers}
    async with srv.http.post(srv.api + path, data=json.dumps(body), headers=hdrs) as resp:
        return resp.status, await resp.json(), resp.headers


async def count(pg_dsn: str, value: Any, *, table: str = "shop__product", column: str = "sku") -> int:
    conn = await asyncpg.connect(pg_dsn)
    try:
        return int(await conn.fetchval(f'SELECT count(*) FROM "{table}" WHERE "{column}" = $1', value))
    finally:
        await conn.close()


def product(sku: str) -> dict[str, Any]:
    return {"sku": sku, "title": "t", "price": "1.00"}


async def test_unreachable_postgres_is_503_with_retry_after(srv: Running, proxy: PgProxy) -> None:
    assert (await post(srv, product("U0")))[0] == 201
    proxy.down = True
    proxy.cut()
    try:
        for body in (product("U1"), product("U2")):
            status, problem, headers = await post(srv, body)
            assert (status, problem["code"]) == (503, "SVC.DB.UNAVAILABLE")
            assert headers["Retry-After"] == "5"
        async with srv.http.get(srv.api + P, headers=srv.auth()) as resp:
            assert resp.status == 503
    finally:
        proxy.down = False
    assert (await post(srv, product("U3")))[0] == 201  # the pool reconnects by itself


async def test_a_commit_whose_answer_arrived_is_201_even_if_the_connection_dies(
    srv: Running, proxy: PgProxy, pg_dsn: str
) -> None:
    proxy.broken.clear()
    proxy.break_commit = "after_commit"
    # with a key: a create in a transaction (a plain one is a statement alone, tested below)
    status, answer, _ = await post(srv, product("C1"), **{"Idempotency-Key": str(uuid.uuid4())})
    assert proxy.broken.is_set()  # the relay did break the connection right after COMMIT
    assert status == 201, answer
    assert await count(pg_dsn, "C1") == 1


# A plain create is one statement committed by itself (``storage.deferred``): its answer is its
# commit's. Each test sends a set of columns no other sent, so that its statement's text is
# parsed on its connection (later runs of a cached statement do not carry the text the relay
# looks for).


async def test_a_lone_statement_whose_answer_arrived_is_201_even_if_the_connection_dies(
    srv: Running, proxy: PgProxy, pg_dsn: str
) -> None:
    proxy.broken.clear()
    proxy.statement_marker, proxy.break_statement = JOINED_INSERT, "after"
    status, answer, _ = await post(srv, {**product("L1"), "description": "after"})
    assert proxy.broken.is_set()  # the relay broke the connection right after the answer
    assert status == 201, answer
    assert await count(pg_dsn, "L1") == 1


async def test_a_lone_statement_whose_answer_was_lost_says_the_outcome_is_unknown(
    srv: Running, proxy: PgProxy, pg_dsn: str
) -> None:
    proxy.broken.clear()
    proxy.statement_marker, proxy.break_statement = JOINED_INSERT, "during"
    status, problem, headers = await post(srv, {**product("L2"), "color": "red"})
    assert proxy.broken.is_set()
    assert (status, problem.get("code")) == (503, "SVC.DB.OUTCOME_UNKNOWN"), problem
    assert "Retry-After" in headers
    assert await count(pg_dsn, "L2") == 1  # it did commit


async def test_a_lost_commit_says_the_outcome_is_unknown_and_the_key_makes_the_retry_safe(
    srv: Running, proxy: PgProxy, pg_dsn: str
) -> None:
    key = str(uuid.uuid4())
    proxy.broken.clear()
    proxy.break_commit = "during_commit"
    status, problem, headers = await post(srv, product("K1"), **{"Idempotency-Key": key})
    assert proxy.broken.is_set()
    assert (status, problem.get("code")) == (503, "SVC.DB.OUTCOME_UNKNOWN"), problem
    assert "Retry-After" in headers
    assert await count(pg_dsn, "K1") == 1  # it did commit
    status, _, headers = await post(srv, product("K1"), **{"Idempotency-Key": key})
    assert (status, headers.get("Idempotent-Replayed")) == (201, "true")
    assert await count(pg_dsn, "K1") == 1  # and the retry did not write again


async def test_a_repeated_key_replays_and_another_body_is_refused(srv: Running, pg_dsn: str) -> None:
    key = str(uuid.uuid4())
    first = await post(srv, product("R1"), **{"Idempotency-Key": key})
    again = await post(srv, product("R1"), **{"Idempotency-Key": key})
    assert first[0] == again[0] == 201
    assert first[1] == again[1] and first[2]["Location"] == again[2]["Location"]
    assert again[2]["Idempotent-Replayed"] == "true"
    status, problem, _ = await post(srv, product("R2"), **{"Idempotency-Key": key})
    assert (status, problem["code"]) == (422, "SVC.IDEMPOTENCY.KEY_REUSED")
    for bad in ("", "has space", "x" * 256):
        async with srv.http.post(
            srv.api + P, json=product("R3"), headers={**srv.auth(), "Idempotency-Key": bad}
        ) as resp:
            assert resp.status == 400 and (await resp.json())["code"] == "SVC.IDEMPOTENCY.KEY_INVALID"
    assert await count(pg_dsn, "R1") == 1


async def test_concurrent_duplicates_have_one_effect(srv: Running, pg_dsn: str) -> None:
    key, path = str(uuid.uuid4()), "/default/api/shop/invoice"  # no unique field to stop duplicates
    duplicates = (post(srv, {"amount": "12.34"}, path, **{"Idempotency-Key": key}) for _ in range(12))
    answers = await asyncio.gather(*duplicates)
    statuses = sorted(a[0] for a in answers)
    assert set(statuses) <= {201, 409} and 201 in statuses
    ids = {a[1]["data"]["id"] for a in answers if a[0] == 201}
    assert len(ids) == 1
    assert await count(pg_dsn, Decimal("12.34"), table="shop__invoice", column="amount") == 1
