"""The document lifecycle over real HTTP and Postgres: every move from every state, reserved
fields, create-and-submit, and moves racing each other on one document."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from .conftest import Running, load, running
from .documents_spec import DOCS, call, move, new

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(DOCS), pool_size=8) as r:
        yield r


def number() -> str:
    return f"N-{uuid.uuid4().hex[:10]}"


async def order_in(srv: Running, state: str) -> dict[str, Any]:
    doc = await new(srv, "order", {"number": number()})
    moves = {"draft": (), "submitted": ("submit",), "cancelled": ("submit", "cancel")}[state]
    await move(srv, "order", doc["id"], *moves)
    return doc


MOVES = {
    "update": ("PATCH", "", {"total": "5.00"}),
    "delete": ("DELETE", "", None),
    "submit": ("POST", "/submit", None),
    "cancel": ("POST", "/cancel", None),
}


@pytest.mark.parametrize(
    ("state", "action", "status", "code", "after"),
    [
        pytest.param("draft", "update", 200, None, "draft", id="draft-update"),
        pytest.param("draft", "delete", 204, None, None, id="draft-delete"),
        pytest.param("draft", "submit", 200, None, "submitted", id="draft-submit"),
        pytest.param("draft", "cancel", 409, "SVC.DOC.CANCEL_NOT_SUBMITTED", "draft", id="draft-cancel"),
        pytest.param("submitted", "update", 409, "SVC.DOC.UPDATE_NOT_DRAFT", "submitted", id="sub-update"),
        pytest.param("submitted", "delete", 409, "SVC.DOC.DELETE_NOT_DRAFT", "submitted", id="sub-delete"),
        pytest.param("submitted", "submit", 409, "SVC.DOC.ALREADY_SUBMITTED", "submitted", id="sub-submit"),
        pytest.param("submitted", "cancel", 200, None, "cancelled", id="sub-cancel"),
        pytest.param("cancelled", "update", 409, "SVC.DOC.UPDATE_NOT_DRAFT", "cancelled", id="can-update"),
        pytest.param("cancelled", "delete", 409, "SVC.DOC.DELETE_NOT_DRAFT", "cancelled", id="can-delete"),
        pytest.param("cancelled", "submit", 409, "SVC.DOC.SUBMIT_NOT_DRAFT", "cancelled", id="can-submit"),
        pytest.param("cancelled", "cancel", 409, "SVC.DOC.ALREADY_CANCELLED", "cancelled", id="can-cancel"),
    ],
)
async def test_every_move_from_every_state(
    srv: Running, state: str, action: str, status: int, code: str | None, after: str | None
) -> None:
    doc = await order_in(srv, state)
    _, before = await call(srv, "GET", f"order/{doc['id']}")
    method, suffix, body = MOVES[action]
    got, answer = await call(srv, method, f"order/{doc['id']}{suffix}", body)
    assert got == status, answer
    if code is not None:
        assert answer["code"] == code and answer["status"] == 409 and answer["type"].endswith(code)
    found, now = await call(srv, "GET", f"order/{doc['id']}")
    if after is None:
        assert found == 404
        return
    assert now["data"]["docstatus"] == after
    if code is not None:  # a refused move changed nothing
        assert now["data"]["version"] == before["data"]["version"]
    else:
        assert now["data"]["version"] == before["data"]["version"] + 1


async def test_if_match_guards_moves(srv: Running) -> None:
    doc = await order_in(srv, "draft")
    status, answer = await call(srv, "POST", f"order/{doc['id']}/submit", headers={"If-Match": '"9"'})
    assert status == 412 and answer["code"] == "SVC.VERSION.MISMATCH"
    status, answer = await call(srv, "POST", f"order/{doc['id']}/submit", headers={"If-Match": '"1"'})
    assert status == 200 and answer["data"]["version"] == 2


SYSTEM = ["id", "version", "docstatus", "tenant_id", "created_at", "updated_at", "created_by", "owner"]


@pytest.mark.parametrize("field", SYSTEM)
async def test_system_fields_are_reserved_even_among_other_problems(srv: Running, field: str) -> None:
    value = "draft" if field == "docstatus" else "x"
    alone = {"number": number(), field: value}
    mixed = {"number": 7, "colour": "red", field: value}  # a bad value and an unknown field beside it
    for body in (alone, mixed):
        status, answer = await call(srv, "POST", "order", body)
        assert status == 422 and answer["code"] == "SVC.DOC.RESERVED_FIELD", answer
        assert {"path": field, "message": "is a system field and cannot be written"} in answer["errors"]
    assert {e["path"] for e in answer["errors"]} == {"number", "colour", field}
    doc = await order_in(srv, "draft")
    for body in ({field: value}, {"total": "x", field: value}):
        status, answer = await call(srv, "PATCH", f"order/{doc['id']}", body)
        assert status == 422 and answer["code"] == "SVC.DOC.RESERVED_FIELD", answer
    status, answer = await call(srv, "POST", "customer", {"name": "C", field: value})  # no lifecycle
    assert status == 422 and answer["code"] == "SVC.DOC.RESERVED_FIELD", answer


async def test_create_and_submit(srv: Running) -> None:
    doc = await new(srv, "order", {"number": number(), "lines": [{"item": "a"}]}, query="?submit=true")
    assert (
        doc["docstatus"] == "submitted"
        and doc["version"] == 1
        and doc["lines"] == [{"item": "a", "ref": None}]
    )
    _, found = await call(srv, "GET", f"order/{doc['id']}")
    assert found["data"]["docstatus"] == "submitted"
    for query in ("", "?submit=false", "?submit=0"):
        assert (await new(srv, "order", {"number": number()}, query=query))["docstatus"] == "draft"
    status, answer = await call(srv, "POST", "order?submit=maybe", {"number": number()})
    assert status == 400 and answer["code"] == "SVC.QUERY.INVALID" and answer["errors"][0]["path"] == "submit"


@pytest.mark.parametrize(
    ("path", "body", "where", "says"),
    [
        pytest.param("order", {"docstatus": "submitted"}, "docstatus", "?submit=true", id="body-asks"),
        pytest.param("order", {"docstatus": 1}, "docstatus", "?submit=true", id="body-asks-number"),
        pytest.param("customer?submit=true", {"name": "C"}, "submit", "no lifecycle", id="no-lifecycle"),
        pytest.param(
            "customer", {"name": "C", "docstatus": "submitted"}, "docstatus", "no lifecycle", id="c"
        ),
        pytest.param("quote?submit=true", {}, "submit", "does not open submit", id="no-update-exposed"),
        pytest.param("memo?submit=true", {}, "submit", "does not open submit", id="submit-disabled"),
    ],
)
async def test_create_submit_not_available(
    srv: Running, path: str, body: dict[str, Any], where: str, says: str
) -> None:
    if path.startswith("order"):
        body = {**body, "number": number()}
    entity = path.split("?")[0]
    _, before = await call(srv, "GET", f"{entity}?count=true") if entity != "quote" else (0, None)
    status, answer = await call(srv, "POST", path, body)
    assert status == 409 and answer["code"] == "SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE", answer
    assert answer["errors"][0]["path"] == where and says in answer["detail"]
    if before is not None:  # nothing was created
        _, after = await call(srv, "GET", f"{entity}?count=true")
        assert after["total"] == before["total"]


async def test_disabled_and_unopened_moves(srv: Running) -> None:
    memo = await new(srv, "memo", {"title": "m"})
    status, answer = await call(srv, "POST", f"memo/{memo['id']}/submit")
    assert status == 404 and answer["code"] == "SVC.ACTION.NOT_FOUND"
    quote = await new(srv, "quote", {"title": "q"})
    status, answer = await call(srv, "POST", f"quote/{quote['id']}/submit")
    assert status == 405 and answer["code"] == "SVC.ACTION.NOT_EXPOSED"
    doc = await order_in(srv, "draft")
    status, _ = await call(srv, "POST", f"order/{doc['id']}/update")  # re-declared standard action
    assert status == 404


# --- concurrency: each round races two moves on one fresh document ------------------------------

ROUNDS = 6


async def test_two_submits_race_exactly_one_wins(srv: Running) -> None:
    for _ in range(ROUNDS):
        doc = await order_in(srv, "draft")
        results = await asyncio.gather(*(call(srv, "POST", f"order/{doc['id']}/submit") for _ in range(2)))
        statuses = sorted(status for status, _ in results)
        assert statuses == [200, 409], results
        loser = next(answer for status, answer in results if status == 409)
        assert loser["code"] == "SVC.DOC.ALREADY_SUBMITTED"
        _, found = await call(srv, "GET", f"order/{doc['id']}")
        assert found["data"]["version"] == 2


async def test_submit_racing_update_never_changes_a_submitted_document(srv: Running) -> None:
    for i in range(ROUNDS):
        doc = await order_in(srv, "draft")
        (s_status, submitted), (u_status, updated) = await asyncio.gather(
            call(srv, "POST", f"order/{doc['id']}/submit"),
            call(srv, "PATCH", f"order/{doc['id']}", {"total": f"{i}.50"}),
        )
        assert s_status == 200, submitted
        _, found = await call(srv, "GET", f"order/{doc['id']}")
        if u_status == 200:  # the update went first: the submit saw it and moved to version 3
            assert updated["data"]["version"] == 2 and submitted["data"]["version"] == 3
            assert found["data"]["total"] == f"{i}.50"
        else:
            assert u_status == 409 and updated["code"] == "SVC.DOC.UPDATE_NOT_DRAFT"
            assert submitted["data"]["version"] == 2 and found["data"]["total"] is None
        assert found["data"]["docstatus"] == "submitted"


async def test_cancel_racing_delete(srv: Running) -> None:
    for _ in range(ROUNDS):
        doc = await order_in(srv, "submitted")
        (c_status, cancelled), (d_status, deleted) = await asyncio.gather(
            call(srv, "POST", f"order/{doc['id']}/cancel"), call(srv, "DELETE", f"order/{doc['id']}")
        )
        assert c_status == 200 and cancelled["data"]["docstatus"] == "cancelled"
        assert d_status == 409 and deleted["code"] == "SVC.DOC.DELETE_NOT_DRAFT"
        _, found = await call(srv, "GET", f"order/{doc['id']}")
        assert found["data"]["docstatus"] == "cancelled" and found["data"]["version"] == 3
    for _ in range(ROUNDS):  # a draft: the delete wins or the cancel is refused, never both
        doc = await order_in(srv, "draft")
        (c_status, cancelled), (d_status, _) = await asyncio.gather(
            call(srv, "POST", f"order/{doc['id']}/cancel"), call(srv, "DELETE", f"order/{doc['id']}")
        )
        assert d_status == 204
        assert (c_status, cancelled["code"]) in (
            (409, "SVC.DOC.CANCEL_NOT_SUBMITTED"),
            (404, "SVC.RECORD.NOT_FOUND"),
        )
