"""The audit trail over real HTTP and Postgres: what is recorded (audited fields, audited actions),
masking, the ``_audit`` listing, and that a failed write leaves no audit row."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap.server import state
from tests.conftest import new_database

from .conftest import Running, load, running
from .documents_spec import DOCS, call, move, new

pytestmark = pytest.mark.asyncio(loop_scope="module")

# fails the commit (a deferred trigger runs after everything else of the transaction, the audit
# row included) of an update that submits a BOOM order or sets its total to 666
BOOM = """
CREATE FUNCTION doc_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.number LIKE 'BOOM%' AND (NEW.docstatus = 1 OR NEW.total = 666) THEN
        RAISE EXCEPTION 'refused at commit';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER doc_boom AFTER UPDATE ON doc__order
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION doc_boom();
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(DOCS)) as r:
        async with r.server.app[state.POOL].acquire() as conn:
            await conn.execute(BOOM)
        yield r


async def trail(srv: Running, entity: str, record_id: str, query: str = "") -> list[dict[str, Any]]:
    status, answer = await call(srv, "GET", f"{entity}/{record_id}/_audit{query}")
    assert status == 200, answer
    rows: list[dict[str, Any]] = answer["data"]
    return rows


async def test_updates_of_audited_fields_are_recorded_masked(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "C", "email": "a@x.io", "credit": "1.00"})
    cid = customer["id"]
    assert await trail(srv, "customer", cid) == []  # create is not an audited action here
    await call(srv, "PATCH", f"customer/{cid}", {"note": "n"})  # not an audited field
    assert await trail(srv, "customer", cid) == []
    rid = uuid.uuid4().hex
    status, _ = await call(
        srv, "PATCH", f"customer/{cid}", {"credit": "2.50", "note": "m"}, headers={"X-Request-Id": rid}
    )
    assert status == 200
    await call(srv, "PATCH", f"customer/{cid}", {"email": "b@x.io"})
    await call(srv, "PATCH", f"customer/{cid}", {"email": None, "credit": "2.50"})  # credit unchanged
    rows = await trail(srv, "customer", cid)
    assert [r["changes"] for r in rows] == [
        {"email": ["****", None]},
        {"email": ["****", "****"]},  # changed, recorded, not revealed
        {"credit": ["1.00", "2.50"]},  # only the audited field of the two that changed
    ]
    last = rows[2]
    assert last["action"] == "update" and last["actor"] == {"sub": "u-1", "username": "alice"}
    assert last["request_id"] == rid and last["version"] == 3
    _, found = await call(srv, "GET", f"customer/{cid}")
    assert rows[0]["at"] == found["data"]["updated_at"]  # the write's own transaction time
    async with srv.server.app[state.POOL].acquire() as conn:  # never stored in clear either
        stored = await conn.fetchval("SELECT string_agg(changes::text, ' ') FROM dap.audit_log")
    assert "a@x.io" not in stored and "b@x.io" not in stored


async def test_audited_actions_record_every_move(srv: Running) -> None:
    doc = await new(srv, "order", {"number": "A-1", "lines": [{"item": "a"}]})
    await call(srv, "PATCH", f"order/{doc['id']}", {"total": "9.90", "lines": [{"item": "b"}]})
    await move(srv, "order", doc["id"], "submit", "cancel")
    rows = await trail(srv, "order", doc["id"])
    assert [r["action"] for r in rows] == ["cancel", "submit", "update", "create"]
    assert [r["version"] for r in rows] == [4, 3, 2, 1]
    assert rows[0]["changes"] == {"docstatus": ["submitted", "cancelled"]}
    assert rows[1]["changes"] == {"docstatus": ["draft", "submitted"]}
    assert rows[2]["changes"] == {
        "lines": [[{"item": "a", "ref": None}], [{"item": "b", "ref": None}]],
        "total": [None, "9.90"],
    }
    assert rows[3]["changes"] == {
        "docstatus": [None, "draft"],
        "lines": [None, [{"item": "a", "ref": None}]],
        "number": [None, "A-1"],
    }
    assert [r["action"] for r in await trail(srv, "order", doc["id"], "?limit=2")] == ["cancel", "submit"]
    page = await trail(srv, "order", doc["id"], "?limit=2&offset=2")
    assert [r["action"] for r in page] == ["update", "create"]
    for bad in ("limit=0", "limit=1001", "limit=x", "offset=-1"):
        status, answer = await call(srv, "GET", f"order/{doc['id']}/_audit?{bad}")
        assert status == 400 and answer["code"] == "SVC.QUERY.INVALID", bad


async def test_create_and_submit_records_both(srv: Running) -> None:
    doc = await new(srv, "order", {"number": "A-2"}, query="?submit=true")
    rows = await trail(srv, "order", doc["id"])
    assert [(r["action"], r["version"]) for r in rows] == [("submit", 1), ("create", 1)]
    assert rows[0]["changes"] == {"docstatus": ["draft", "submitted"]}


async def test_delete_is_recorded_and_the_trail_outlives_the_record(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Gone", "email": "g@x.io"})
    assert (await call(srv, "DELETE", f"customer/{customer['id']}"))[0] == 204
    status, answer = await call(srv, "GET", f"customer/{customer['id']}/_audit")
    assert status == 404 and answer["code"] == "SVC.RECORD.NOT_FOUND"  # no record to decide who may read
    async with srv.server.app[state.POOL].acquire() as conn:
        row = await conn.fetchrow(
            "SELECT action, version, changes FROM dap.audit_log WHERE record_id = $1",
            uuid.UUID(customer["id"]),
        )
    assert row is not None and row["action"] == "delete" and row["version"] is None
    assert row["changes"] == {"name": ["Gone", None], "email": ["****", None]}


async def test_a_delete_records_what_its_on_delete_changes(srv: Running) -> None:
    doc = await new(srv, "order", {"number": "A-4"})
    note = await new(srv, "note", {"order": doc["id"], "text": "t"})  # set_null; update audited
    delivery = await new(srv, "delivery", {"order": doc["id"]})  # cascade; delete audited
    assert (await call(srv, "DELETE", f"order/{doc['id']}"))[0] == 204
    rows = await trail(srv, "note", note["id"])
    assert [(r["action"], r["version"], r["changes"]) for r in rows] == [
        ("update", 2, {"order": [doc["id"], None]})
    ]
    async with srv.server.app[state.POOL].acquire() as conn:
        found = await conn.fetch(
            "SELECT entity, action, changes FROM dap.audit_log WHERE record_id = ANY($1) ORDER BY id",
            [uuid.UUID(delivery["id"]), uuid.UUID(doc["id"])],
        )
    assert [(r["entity"], r["action"]) for r in found] == [
        ("doc/order", "create"),
        ("doc/delivery", "delete"),
        ("doc/order", "delete"),
    ]
    assert found[1]["changes"] == {"docstatus": ["draft", None], "order": [doc["id"], None]}


async def test_a_failed_write_leaves_no_audit_row(srv: Running) -> None:
    doc = await new(srv, "order", {"number": "BOOM-1"})
    status, answer = await call(srv, "POST", f"order/{doc['id']}/submit")  # refused at commit
    assert status == 500 and answer["code"] == "SVC.SERVER.INTERNAL"
    status, _ = await call(srv, "PATCH", f"order/{doc['id']}", {"total": "666"})
    assert status == 500
    status, answer = await call(srv, "PATCH", f"order/{doc['id']}", {"number": "A-1"})  # duplicate
    assert status == 409 and answer["code"] == "SVC.VALIDATE.DUPLICATE"
    assert (await call(srv, "POST", f"order/{doc['id']}/cancel"))[0] == 409  # refused move
    assert [r["action"] for r in await trail(srv, "order", doc["id"])] == ["create"]
    _, found = await call(srv, "GET", f"order/{doc['id']}")
    assert found["data"]["docstatus"] == "draft" and found["data"]["total"] is None
    async with srv.server.app[state.POOL].acquire() as conn:  # and none was left anywhere else
        count = await conn.fetchval(
            "SELECT count(*) FROM dap.audit_log WHERE record_id = $1", uuid.UUID(doc["id"])
        )
    assert count == 1


async def test_trail_is_read_like_the_record(srv: Running) -> None:
    doc = await new(srv, "order", {"number": "A-3"})
    await srv.register("other")
    status, answer = await call(srv, "GET", f"/other/api/doc/order/{doc['id']}/_audit", ws="other")
    assert status == 404 and answer["code"] == "SVC.RECORD.NOT_FOUND"  # another workspace's record
    status, answer = await call(srv, "GET", f"order/{uuid.uuid4()}/_audit")
    assert status == 404 and answer["code"] == "SVC.RECORD.NOT_FOUND"
    status, answer = await call(srv, "GET", "order/not-an-id/_audit")
    assert status == 404
    quote = await new(srv, "quote", {"title": "q"})  # quote exposes no find
    status, answer = await call(srv, "GET", f"quote/{quote['id']}/_audit")
    assert status == 404 and answer["code"] == "SVC.ACTION.NOT_EXPOSED"
    async with srv.http.get(f"{srv.api}/default/api/doc/order/{doc['id']}/_audit") as resp:
        assert resp.status == 401


async def test_openapi_describes_trails_and_create_and_submit(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json") as resp:
        doc = await resp.json()
    paths = doc["paths"]
    trail = paths["/api/doc/order/{id}/_audit"]["get"]
    assert {p["name"] for p in trail["parameters"]} == {"limit", "offset"}
    assert "/api/doc/quote/{id}/_audit" not in paths  # quote exposes no find
    assert [p["name"] for p in paths["/api/doc/order"]["post"]["parameters"]] == ["submit"]
    assert "parameters" not in paths["/api/doc/quote"]["post"]  # submit not open there
    assert "parameters" not in paths["/api/doc/customer"]["post"]  # no lifecycle
    assert "/api/doc/memo/{id}/submit" not in paths and "/api/doc/memo/{id}/cancel" in paths  # disabled


GUARDED = {
    "sec/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: sec}\nspec: {title: Sec}\n",
    "sec/account.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: account, module: sec}
spec:
  fields:
    - {name: name, type: string, audited: true}
    - {name: iban, type: string, audited: true, required_permission: sec.account.read_iban}
  expose: [{type: rest}]
""",
    "sec/roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: [sec.account.read]
""",
}


async def test_trail_hides_fields_the_caller_may_not_read(pg_server_dsn: str) -> None:
    _, dsn = await new_database(pg_server_dsn)
    async with running(dsn, load(GUARDED)) as srv:
        url = f"{srv.api}/default/api/sec/account"
        async with srv.http.post(url, json={"name": "a", "iban": "DE1"}, headers=srv.auth()) as resp:
            rid = (await resp.json())["data"]["id"]
        async with srv.http.patch(f"{url}/{rid}", json={"name": "b", "iban": "DE2"}, headers=srv.auth()):
            pass
        async with srv.http.get(f"{url}/{rid}/_audit", headers=srv.auth()) as resp:
            assert (await resp.json())["data"][0]["changes"] == {"iban": ["DE1", "DE2"], "name": ["a", "b"]}
        async with srv.http.get(f"{url}/{rid}/_audit", headers=srv.auth(roles=["clerk"])) as resp:
            assert resp.status == 200
            assert (await resp.json())["data"][0]["changes"] == {"name": ["a", "b"]}


async def test_trail_ids_reveal_nothing_of_other_workspaces(srv: Running) -> None:
    doc = await new(srv, "order", {"number": f"P-{uuid.uuid4().hex[:8]}"})
    await move(srv, "order", doc["id"], "submit")
    ids = [row["id"] for row in await trail(srv, "order", doc["id"])]
    assert len(ids) == 2
    assert all(uuid.UUID(i).version == 4 for i in ids)  # random, not a sequence shared by all tenants
