"""Property tests: no query string and no JSON body makes the server answer 5xx."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from dap.server import errors
from dap.server.catalog import Catalog
from dap.server.workflows import filters

from .conftest import Running, load, running

JSON = {"Content-Type": "application/json"}  # every JSON endpoint refuses other bodies (415)

CATALOG: Catalog = load()
PRODUCT = CATALOG.resources["shop/product"]
NAMES = [
    *PRODUCT.fields,
    "id",
    "version",
    "owner",
    "created_at",
    "docstatus",
    "nosuch",
    "sort",
    "limit",
    "offset",
    "count",
    "fields",
]
OPS = [
    "",
    *(
        f"[{op}]"
        for op in (
            "eq",
            "neq",
            "gt",
            "gte",
            "lt",
            "lte",
            "between",
            "in",
            "nin",
            "like",
            "ilike",
            "null",
            "notnull",
            "bogus",
        )
    ),
]
VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "1",
            "-5",
            "1.5",
            "1e400",
            "2024-01-01",
            "2024-02-30T25:00",
            "true",
            "a,b",
            "1,2",
            ",",
            "red,blue",
            "6f1c3a9e-7b7d-4d7a-9a55-1b2c3d4e5f60",
            "-price",
            "sku,price",
            "0",
            "1001",
        ]
    ),
)
PAIRS = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(OPS), VALUES), max_size=4)


@settings(max_examples=300, deadline=None)
@given(PAIRS)
def test_parser_only_ever_raises_bad_request(pairs: list[tuple[str, str, str]]) -> None:
    with contextlib.suppress(errors.BadRequest):
        filters.parse(PRODUCT, [(name + op, value) for name, op, value in pairs])


SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**70,
    1.5,
    1e308,
    "",
    "x",
    "\x00",
    "\ud800",
    "2024-01-01",
    "6f1c3a9e-7b7d-4d7a-9a55-1b2c3d4e5f60",
    "1.005",
    "red",
    [],
    {},
    [1, "a"],
    {"a": {"b": None}},
]
FIELD_NAMES = [*PRODUCT.fields, "eco", "id", "version", "zz"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and roll < 0.3:
        return {
            rng.choice(["co2", "supplier_code", "part", "count", "k"]): _value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))
        }
    return rng.choice(SCALARS)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn) as r:
        yield r


@pytest.mark.asyncio(loop_scope="module")
async def test_http_never_answers_5xx(srv: Running) -> None:
    rng = random.Random(20261121)
    statuses: list[int] = []
    for _ in range(150):
        body = {rng.choice(FIELD_NAMES): _value(rng) for _ in range(rng.randint(0, 6))}
        if rng.random() < 0.5:  # mostly valid bodies with one odd field, so inserts happen too
            body = {"sku": f"F{rng.random()}", "title": "t", "price": "1.00", **dict(list(body.items())[:1])}
        raw = json.dumps(body, allow_nan=False).encode("utf-8", "surrogatepass")
        async with srv.http.post(
            f"{srv.api}/default/api/shop/product", data=raw, headers={**JSON, **srv.auth()}
        ) as resp:
            statuses.append(resp.status)
            assert resp.status < 500, (body, await resp.text())
        params = [
            (rng.choice(NAMES) + rng.choice(OPS), str(rng.choice([*SCALARS[1:], "a,b", "1,2", "-price"])))
            for _ in range(rng.randint(0, 3))
        ]
        async with srv.http.get(
            f"{srv.api}/default/api/shop/product", params=params, headers=srv.auth()
        ) as resp:
            statuses.append(resp.status)
            assert resp.status < 500, (params, await resp.text())
    assert any(s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
