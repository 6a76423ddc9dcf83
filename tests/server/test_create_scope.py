"""Create scope over real HTTP: a create (or an update) naming a referenced record must carry that
record's value in the scoped field — 403 ``SVC.AUTH.CREATE_SCOPE``, never silently overwritten."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from .access_spec import ACCESS, ADMIN, call, new
from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(ACCESS)) as r:
        yield r


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def customers(srv: Running) -> dict[str, str]:
    out = {}
    for region in ("north", "south"):
        out[region] = (await new(srv, "customer", {"name": region.title(), "region": region}))["id"]
    out["none"] = (await new(srv, "customer", {"name": "Nowhere"}))["id"]
    return out


def number() -> str:
    return f"C-{uuid.uuid4().hex[:10]}"


async def count(srv: Running, prefix: str) -> int:
    _, answer = await call(srv, "GET", f"order?number[like]={prefix}%25&count=true")
    total: int = answer["total"]
    return total


async def test_a_create_matching_the_referenced_record_is_accepted(
    srv: Running, customers: dict[str, str]
) -> None:
    status, answer = await call(
        srv, "POST", "order", {"number": number(), "customer": customers["north"], "region": "north"}
    )
    assert status == 201 and answer["data"]["region"] == "north", answer


@pytest.mark.parametrize(
    ("region", "shown"),
    [pytest.param("south", "south", id="other-value"), pytest.param(None, None, id="left-out")],
)
async def test_a_create_differing_from_the_referenced_record_is_forbidden(
    srv: Running, customers: dict[str, str], region: str | None, shown: str | None
) -> None:
    n = number()
    body: dict[str, Any] = {"number": n, "customer": customers["north"]}
    if region is not None:
        body["region"] = region
    status, answer = await call(srv, "POST", "order", body)  # even admin: it is a rule of the data
    assert status == 403 and answer["code"] == "SVC.AUTH.CREATE_SCOPE", answer
    assert answer["errors"] == [
        {"path": "region", "message": "must be 'north', as on the referenced sales/customer"}
    ]
    assert await count(srv, n) == 0


async def test_without_the_reference_the_rule_does_not_apply(srv: Running) -> None:
    status, answer = await call(srv, "POST", "order", {"number": number(), "region": "anywhere"})
    assert status == 201, answer
    status, answer = await call(srv, "POST", "order", {"number": number(), "customer": None, "region": "x"})
    assert status == 201, answer


async def test_a_referenced_record_without_the_value_matches_only_a_left_out_field(
    srv: Running, customers: dict[str, str]
) -> None:
    status, answer = await call(srv, "POST", "order", {"number": number(), "customer": customers["none"]})
    assert status == 201, answer
    status, answer = await call(
        srv, "POST", "order", {"number": number(), "customer": customers["none"], "region": "north"}
    )
    assert status == 403 and answer["code"] == "SVC.AUTH.CREATE_SCOPE", answer
    assert "has no region" in answer["detail"] and "None" not in answer["detail"], answer


async def test_a_reference_to_nothing_is_a_relation_error(srv: Running) -> None:
    status, answer = await call(
        srv, "POST", "order", {"number": number(), "customer": str(uuid.uuid4()), "region": "north"}
    )
    assert status == 422 and answer["code"] == "SVC.VALIDATE.RELATION_NOT_FOUND", answer


@pytest.mark.parametrize(
    ("change", "status"),
    [
        pytest.param({"region": "south"}, 403, id="field-away"),
        pytest.param({"customer": "south"}, 403, id="reference-away"),
        pytest.param({"customer": "south", "region": "south"}, 200, id="both-together"),
        pytest.param({"amount": "3.00"}, 200, id="unrelated"),
        pytest.param({"customer": None, "region": "west"}, 200, id="reference-dropped"),
    ],
)
async def test_an_update_is_held_to_the_same_rule(
    srv: Running, customers: dict[str, str], change: dict[str, Any], status: int
) -> None:
    order = await new(srv, "order", {"number": number(), "customer": customers["north"], "region": "north"})
    body = {k: customers[v] if k == "customer" and v is not None else v for k, v in change.items()}
    got, answer = await call(srv, "PATCH", f"order/{order['id']}", body)
    assert got == status, answer
    _, now = await call(srv, "GET", f"order/{order['id']}")
    if status == 403:
        assert answer["code"] == "SVC.AUTH.CREATE_SCOPE"
        assert now["data"]["version"] == order["version"] and now["data"]["region"] == "north"
    else:
        assert now["data"]["version"] == order["version"] + 1


async def test_the_current_value_of_the_referenced_record_counts(
    srv: Running, customers: dict[str, str]
) -> None:
    moved = await new(srv, "customer", {"name": "Mover", "region": "north"})
    status, _ = await call(srv, "PATCH", f"customer/{moved['id']}", {"region": "south"}, headers=ADMIN)
    assert status == 200
    status, answer = await call(
        srv, "POST", "order", {"number": number(), "customer": moved["id"], "region": "north"}
    )
    assert status == 403, answer  # the current value counts, not one seen before
