"""References between records and documents: which deletes, cancels and submits they refuse, with
which code (DOC.* from the same entity family, REF.* from another entity), and their races."""

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


async def order(srv: Running, *moves: str, **fields: Any) -> str:
    doc = await new(srv, "order", {"number": f"N-{uuid.uuid4().hex[:10]}", **fields})
    await move(srv, "order", doc["id"], *moves)
    return str(doc["id"])


async def refused(srv: Running, method: str, path: str, code: str) -> list[dict[str, str]]:
    status, answer = await call(srv, method, path)
    assert status == 409 and answer["code"] == code, answer
    errors: list[dict[str, str]] = answer["errors"]
    return errors


async def test_restrict_from_another_entity_blocks_delete(srv: Running) -> None:
    customer = (await new(srv, "customer", {"name": "C"}))["id"]
    await order(srv, customer=customer)
    errors = await refused(srv, "DELETE", f"customer/{customer}", "SVC.REF.DELETE_BLOCKED")
    assert errors == [{"path": "doc/order.customer", "message": "records refer to this one"}]
    target = await order(srv)
    pin = (await new(srv, "pin", {"order": target}))["id"]
    errors = await refused(srv, "DELETE", f"order/{target}", "SVC.REF.DELETE_BLOCKED")
    assert errors == [{"path": "doc/pin.order", "message": "records refer to this one"}]
    assert (await call(srv, "DELETE", f"pin/{pin}"))[0] == 204
    assert (await call(srv, "DELETE", f"order/{target}"))[0] == 204


async def test_settled_documents_of_another_entity_block_delete_despite_cascade(srv: Running) -> None:
    target = await order(srv)
    draft = (await new(srv, "delivery", {"order": target}))["id"]
    settled = (await new(srv, "delivery", {"order": target}))["id"]
    await move(srv, "delivery", settled, "submit")
    errors = await refused(srv, "DELETE", f"order/{target}", "SVC.REF.DELETE_BLOCKED")
    assert [e["path"] for e in errors] == ["doc/delivery.order"]
    assert "submitted or cancelled documents" in errors[0]["message"]
    assert (await call(srv, "GET", f"delivery/{draft}"))[0] == 200  # nothing cascaded on refusal
    await move(srv, "delivery", settled, "cancel")  # cancelled documents still hold it
    await refused(srv, "DELETE", f"order/{target}", "SVC.REF.DELETE_BLOCKED")


async def test_draft_referrers_follow_on_delete(srv: Running) -> None:
    target = await order(srv)
    delivery = (await new(srv, "delivery", {"order": target}))["id"]  # cascade
    note = (await new(srv, "note", {"order": target}))["id"]  # set_null
    amendment = await order(srv, amended_from=target)  # same entity, set_null, draft
    assert (await call(srv, "DELETE", f"order/{target}"))[0] == 204
    assert (await call(srv, "GET", f"delivery/{delivery}"))[0] == 404
    assert (await call(srv, "GET", f"note/{note}"))[1]["data"]["order"] is None
    assert (await call(srv, "GET", f"order/{amendment}"))[1]["data"]["amended_from"] is None


async def test_same_entity_references_answer_doc_codes(srv: Running) -> None:
    target = await order(srv)
    amendment = await order(srv, "submit", amended_from=target)
    errors = await refused(srv, "DELETE", f"order/{target}", "SVC.DOC.DELETE_REFERENCED")
    assert errors[0]["path"] == "doc/order.amended_from"
    await move(srv, "order", amendment, "cancel")
    await refused(srv, "DELETE", f"order/{target}", "SVC.DOC.DELETE_REFERENCED")

    held = await order(srv)
    await order(srv, lines=[{"item": "x", "ref": held}])  # a child row of another order, restrict
    errors = await refused(srv, "DELETE", f"order/{held}", "SVC.DOC.DELETE_REFERENCED")
    assert errors == [{"path": "doc/order.ref", "message": "records refer to this one"}]


async def test_a_records_own_rows_never_block(srv: Running) -> None:
    doc = await order(srv)
    status, _ = await call(
        srv, "PATCH", f"order/{doc}", {"amended_from": doc, "lines": [{"item": "a", "ref": doc}]}
    )
    assert status == 200
    await move(srv, "order", doc, "submit", "cancel")  # its own references block no cancel
    draft = await order(srv)
    status, _ = await call(
        srv, "PATCH", f"order/{draft}", {"amended_from": draft, "lines": [{"item": "a", "ref": draft}]}
    )
    assert status == 200
    assert (await call(srv, "DELETE", f"order/{draft}"))[0] == 204  # its own rows go with it


async def test_submitted_referrers_block_cancel(srv: Running) -> None:
    target = await order(srv, "submit")
    delivery = (await new(srv, "delivery", {"order": target}))["id"]
    await new(srv, "note", {"order": target})  # a plain record blocks no cancel
    await new(srv, "pin", {"order": target})
    await move(srv, "delivery", delivery, "submit")
    errors = await refused(srv, "POST", f"order/{target}/cancel", "SVC.REF.CANCEL_BLOCKED")
    assert errors == [
        {"path": "doc/delivery.order", "message": "submitted documents refer to this one; cancel them first"}
    ]
    assert (await call(srv, "GET", f"order/{target}"))[1]["data"]["docstatus"] == "submitted"
    await move(srv, "delivery", delivery, "cancel")
    await move(srv, "order", target, "cancel")


async def test_same_entity_submitted_referrers_block_cancel_with_doc_code(srv: Running) -> None:
    target = await order(srv, "submit")
    amendment = await order(srv, "submit", amended_from=target)
    via_line = await order(srv, "submit", lines=[{"item": "x", "ref": target}])
    errors = await refused(srv, "POST", f"order/{target}/cancel", "SVC.DOC.CANCEL_REFERENCED")
    assert sorted(e["path"] for e in errors) == ["doc/order.amended_from", "doc/order.ref"]
    await move(srv, "order", amendment, "cancel")
    await move(srv, "order", via_line, "cancel")
    await move(srv, "order", target, "cancel")


async def test_both_kinds_answer_the_doc_code(srv: Running) -> None:
    target = await order(srv, "submit")
    await order(srv, "submit", amended_from=target)
    delivery = (await new(srv, "delivery", {"order": target}))["id"]
    await move(srv, "delivery", delivery, "submit")
    errors = await refused(srv, "POST", f"order/{target}/cancel", "SVC.DOC.CANCEL_REFERENCED")
    assert sorted(e["path"] for e in errors) == ["doc/delivery.order", "doc/order.amended_from"]


async def test_submit_refuses_references_to_cancelled_documents(srv: Running) -> None:
    gone = await order(srv, "submit", "cancel")
    delivery = (await new(srv, "delivery", {"order": gone}))["id"]
    status, answer = await call(srv, "POST", f"delivery/{delivery}/submit")
    assert status == 409 and answer["code"] == "SVC.REF.TARGET_CANCELLED"
    assert answer["errors"] == [{"path": "order", "message": "names a cancelled document"}]
    line = await order(srv, lines=[{"item": "a"}, {"item": "b", "ref": gone}])
    status, answer = await call(srv, "POST", f"order/{line}/submit")
    assert status == 409 and answer["errors"] == [
        {"path": "lines.ref", "message": "names a cancelled document"}
    ]
    status, answer = await call(
        srv, "POST", "order?submit=true", {"number": f"N-{uuid.uuid4().hex[:8]}", "amended_from": gone}
    )
    assert status == 409 and answer["code"] == "SVC.REF.TARGET_CANCELLED"
    _, found = await call(srv, "GET", f"order?amended_from={gone}&count=true")
    assert found["total"] == 0  # the create was rolled back with the refused submit
    live = await order(srv, "submit")
    await call(srv, "PATCH", f"delivery/{delivery}", {"order": live})
    assert (await call(srv, "POST", f"delivery/{delivery}/submit"))[0] == 200


ROUNDS = 6


async def test_cancel_racing_a_referrers_submit(srv: Running) -> None:
    """Never both: a submitted delivery pointing at a cancelled order."""
    for _ in range(ROUNDS):
        target = await order(srv, "submit")
        delivery = (await new(srv, "delivery", {"order": target}))["id"]
        (c_status, cancelled), (s_status, submitted) = await asyncio.gather(
            call(srv, "POST", f"order/{target}/cancel"), call(srv, "POST", f"delivery/{delivery}/submit")
        )
        assert sorted([c_status, s_status]) == [200, 409], (cancelled, submitted)
        loser = cancelled if c_status == 409 else submitted
        assert loser["code"] in ("SVC.REF.CANCEL_BLOCKED", "SVC.REF.TARGET_CANCELLED")


async def test_create_racing_a_delete_of_its_target(srv: Running) -> None:
    """Never both: a new pin pointing at a deleted order (the relation check locks the target)."""
    for _ in range(ROUNDS):
        target = await order(srv)
        (p_status, pinned), (d_status, deleted) = await asyncio.gather(
            call(srv, "POST", "pin", {"order": target}), call(srv, "DELETE", f"order/{target}")
        )
        assert sorted([p_status, d_status]) in ([201, 409], [204, 422]), (pinned, deleted)
        if p_status == 201:
            assert deleted["code"] == "SVC.REF.DELETE_BLOCKED"
            assert (await call(srv, "GET", f"order/{target}"))[0] == 200
        else:
            assert pinned["code"] == "SVC.VALIDATE.RELATION_NOT_FOUND"


async def test_child_row_relations_must_name_records_of_the_workspace(srv: Running) -> None:
    mine = await order(srv)
    await srv.register("elsewhere")
    theirs = (await new_in(srv, "elsewhere", {"number": f"E-{uuid.uuid4().hex[:8]}"}))["id"]
    nowhere = str(uuid.uuid4())
    lines = [{"item": "a", "ref": mine}, {"item": "b", "ref": nowhere}, {"item": "c", "ref": theirs}]
    status, answer = await call(srv, "POST", "order", {"number": f"R-{uuid.uuid4().hex[:8]}", "lines": lines})
    assert (status, answer["code"]) == (422, "SVC.VALIDATE.RELATION_NOT_FOUND")
    assert [e["path"] for e in answer["errors"]] == ["lines[1].ref", "lines[2].ref"]
    status, answer = await call(srv, "PATCH", f"order/{mine}", {"customer": nowhere, "lines": lines[1:2]})
    assert status == 422
    assert sorted(e["path"] for e in answer["errors"]) == ["customer", "lines[0].ref"]


async def new_in(srv: Running, ws: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = await call(srv, "POST", f"/{ws}/api/doc/order", body, ws=ws)
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data
