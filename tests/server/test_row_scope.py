"""Row scope over real HTTP: assignments, session-sourced filters and literal fixed filters narrow
every read and write by id, fill and guard creates, and never widen from the query string."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from .access_spec import ACCESS, ADMIN, as_, call, new
from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

CARL = as_("carl", "clerk", "submitter")
BOB = as_("bob", "clerk")
AUDITOR = as_("ada", "auditor")
NORTH_SOUTH = as_("nora", attrs={"regions": ["north", "south"]})
NORTH = as_("ned", attrs={"regions": "north"})
NO_REGIONS = as_("nils")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(ACCESS)) as r:
        yield r


def tag() -> str:
    return uuid.uuid4().hex[:8]


async def numbers(srv: Running, query: str, headers: dict[str, str]) -> list[str]:
    status, answer = await call(srv, "GET", f"order?{query}&sort=number", headers=headers)
    assert status == 200, answer
    return [r["number"] for r in answer["data"]]


async def orders(srv: Running) -> tuple[str, dict[str, Any], dict[str, Any]]:
    t = tag()
    carls = await new(srv, "order", {"number": f"{t}-c", "buyer": "carl"})
    bobs = await new(srv, "order", {"number": f"{t}-b", "buyer": "bob"})
    return t, carls, bobs


async def test_a_list_shows_only_the_callers_rows_and_counts_them(srv: Running) -> None:
    t, _, _ = await orders(srv)
    await new(srv, "order", {"number": f"{t}-x"})  # nobody's
    assert await numbers(srv, f"number[like]={t}%", CARL) == [f"{t}-c"]
    assert await numbers(srv, f"number[like]={t}%", BOB) == [f"{t}-b"]
    status, answer = await call(srv, "GET", f"order?number[like]={t}%25&count=true", headers=CARL)
    assert status == 200 and answer["total"] == 1, answer


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("buyer=bob", id="eq-other"),
        pytest.param("buyer[in]=bob,carl", id="in-both"),
        pytest.param("buyer[neq]=carl", id="neq-self"),
        pytest.param("buyer[null]", id="null"),
    ],
)
async def test_query_parameters_never_widen_the_scope(srv: Running, query: str) -> None:
    t, _, _ = await orders(srv)
    got = await numbers(srv, f"number[like]={t}%&{query}", CARL)
    assert set(got) <= {f"{t}-c"}
    assert f"{t}-b" not in got


async def test_callers_holding_all_rows_see_every_row(srv: Running) -> None:
    t, _, _ = await orders(srv)
    expected = [f"{t}-b", f"{t}-c"]
    for who in (AUDITOR, ADMIN, as_("mona", "manager")):  # *.all_rows, admin, sales.order.*
        assert await numbers(srv, f"number[like]={t}%", who) == expected


async def test_a_record_outside_the_scope_is_forbidden_by_id_and_a_missing_one_is_not_found(
    srv: Running,
) -> None:
    _, _, bobs = await orders(srv)
    for method, suffix, body in (
        ("GET", "", None),
        ("PATCH", "", {"amount": "1.00"}),
        ("DELETE", "", None),
        ("POST", "/submit", None),
        ("GET", "/_audit", None),
    ):
        status, answer = await call(srv, method, f"order/{bobs['id']}{suffix}", body, headers=CARL)
        assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", (method, suffix, answer)
        assert "buyer by your username" in answer["detail"]
    status, answer = await call(srv, "GET", f"order/{uuid.uuid4()}", headers=CARL)
    assert status == 404 and answer["code"] == "SVC.RECORD.NOT_FOUND", answer
    _, answer = await call(srv, "GET", f"order/{bobs['id']}")
    assert answer["data"]["version"] == bobs["version"] and answer["data"]["docstatus"] == "draft"


async def test_in_scope_reads_and_writes_work(srv: Running) -> None:
    _, carls, _ = await orders(srv)
    submitted = await new(srv, "order", {"number": f"{tag()}-s"}, headers=CARL)
    status, answer = await call(srv, "POST", f"order/{submitted['id']}/submit", headers=CARL)
    assert status == 200 and answer["data"]["docstatus"] == "submitted", answer
    status, answer = await call(srv, "PATCH", f"order/{carls['id']}", {"amount": "2.50"}, headers=CARL)
    assert status == 200 and answer["data"]["amount"] == "2.50", answer
    status, answer = await call(srv, "GET", f"order/{carls['id']}/_audit", headers=CARL)
    assert status == 200, answer
    status, _ = await call(srv, "DELETE", f"order/{carls['id']}", headers=CARL)
    assert status == 204


async def test_the_find_cache_never_answers_an_out_of_scope_caller(srv: Running) -> None:
    _, carls, _ = await orders(srv)
    for _ in range(2):
        status, _ = await call(srv, "GET", f"order/{carls['id']}")  # admin reads fill the cache
        assert status == 200
    status, answer = await call(srv, "GET", f"order/{carls['id']}", headers=BOB)
    assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", answer
    status, _ = await call(srv, "GET", f"order/{carls['id']}", headers=CARL)
    assert status == 200


async def test_create_fills_the_assignment_and_refuses_another_value(srv: Running) -> None:
    t = tag()
    status, answer = await call(srv, "POST", "order", {"number": f"{t}-1"}, headers=CARL)
    assert status == 201 and answer["data"]["buyer"] == "carl", answer
    status, answer = await call(srv, "POST", "order", {"number": f"{t}-2", "buyer": None}, headers=CARL)
    assert status == 201 and answer["data"]["buyer"] == "carl", answer
    status, answer = await call(srv, "POST", "order", {"number": f"{t}-3", "buyer": "bob"}, headers=CARL)
    assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", answer
    assert answer["errors"] == [{"path": "buyer", "message": "must be carl (your username)"}]
    assert await numbers(srv, f"number[like]={t}%", ADMIN) == [f"{t}-1", f"{t}-2"]  # nothing else written
    status, answer = await call(srv, "POST", "order", {"number": f"{t}-4", "buyer": "bob"}, headers=AUDITOR)
    assert status == 201 and answer["data"]["buyer"] == "bob", answer  # all_rows may assign anyone


async def test_an_update_cannot_move_a_record_out_of_the_scope(srv: Running) -> None:
    _, carls, _ = await orders(srv)
    status, answer = await call(srv, "PATCH", f"order/{carls['id']}", {"buyer": "bob"}, headers=CARL)
    assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", answer
    status, answer = await call(srv, "PATCH", f"order/{carls['id']}", {"buyer": None}, headers=CARL)
    assert status == 403, answer
    _, answer = await call(srv, "GET", f"order/{carls['id']}")
    assert answer["data"]["buyer"] == "carl" and answer["data"]["version"] == carls["version"]


async def visits(srv: Running) -> str:
    t = tag()
    for region, archived in (("north", False), ("south", False), ("east", False), ("north", True)):
        await new(srv, "visit", {"title": f"{t}-{region}-{archived}", "region": region, "archived": archived})
    return t


async def titles(srv: Running, t: str, headers: dict[str, str], extra: str = "") -> list[str]:
    status, answer = await call(srv, "GET", f"visit?title[like]={t}%&sort=title{extra}", headers=headers)
    assert status == 200, answer
    return [r["title"] for r in answer["data"]]


async def test_a_session_attribute_list_means_one_of_and_a_constant_always_applies(srv: Running) -> None:
    t = await visits(srv)
    assert await titles(srv, t, NORTH_SOUTH) == [f"{t}-north-False", f"{t}-south-False"]
    assert await titles(srv, t, NORTH) == [f"{t}-north-False"]
    assert await titles(srv, t, NORTH, "&archived=true") == []  # the constant cannot be lifted
    assert await titles(srv, t, NORTH, "&region=east") == []
    assert len(await titles(srv, t, ADMIN)) == 4


async def test_an_identity_without_the_attribute_sees_and_writes_nothing(srv: Running) -> None:
    t = await visits(srv)
    assert await titles(srv, t, NO_REGIONS) == []
    status, answer = await call(srv, "POST", "visit", {"title": "x", "region": "north"}, headers=NO_REGIONS)
    assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", answer
    assert "no usable regions" in answer["errors"][0]["message"]


async def test_creates_are_held_to_session_filters_and_constants(srv: Running) -> None:
    status, answer = await call(srv, "POST", "visit", {"title": "v", "region": "east"}, headers=NORTH_SOUTH)
    assert status == 403 and answer["errors"][0]["path"] == "region", answer
    assert answer["errors"][0]["message"] == "must be one of north, south (your regions)"
    status, answer = await call(srv, "POST", "visit", {"title": "v"}, headers=NORTH_SOUTH)
    assert status == 403, answer  # two values to choose from: the server does not guess
    status, answer = await call(srv, "POST", "visit", {"title": "v"}, headers=NORTH)
    assert status == 201 and answer["data"]["region"] == "north", answer  # one value: filled in
    status, answer = await call(
        srv, "POST", "visit", {"title": "v", "region": "north", "archived": True}, headers=NORTH
    )
    assert status == 403 and answer["errors"][0]["path"] == "archived", answer


async def test_unscoped_entities_are_untouched(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Everyone's"})
    status, _ = await call(srv, "GET", f"customer/{customer['id']}", headers=NO_REGIONS)
    assert status == 200
