"""Each /ctx primitive through a real invoke: entity, db/query, cache, lock, and their refusals."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest

from .conftest import Bridged
from .test_invoke import dec, item, order, run, stock

pytestmark = pytest.mark.asyncio(loop_scope="module")


def step(primitive: str, op: str, **body: Any) -> dict[str, Any]:
    return {"primitive": primitive, "op": op, "body": body}


async def results(srv: Bridged, *steps: dict[str, Any], ws: str = "default") -> list[tuple[int, Any]]:
    it = await item(srv, ws=ws)
    o = await order(srv, it, ws=ws)
    status, answer = await run(srv, o, ws=ws, steps=list(steps))
    assert status == 200, answer
    return [(r["status"], r["answer"]) for r in answer["result"]["results"]]


async def test_entity_get_set_update(srv: Bridged) -> None:
    it = await item(srv, stock=7)
    key = it["id"]
    got = await results(
        srv,
        step("entity", "get", named="store/item", key=key),
        step("entity", "update", named="store/item", key=key, fields={"note": "merged"}),
        step("entity", "set", named="store/item", key=key, data={"sku": "new-sku", "price": "9.50"}),
        step("entity", "update", named="store/item", key=key, fields={"stock": "many"}),
        step("entity", "set", named="store/item", key=key, data={"price": "1"}),
        step("entity", "get", named="store/nothing", key=key),
    )
    assert got[0][0] == 200 and got[0][1]["data"]["stock"] == 7
    assert got[1][0] == 200 and got[1][1]["data"]["note"] == "merged" and got[1][1]["data"]["stock"] == 7
    data = got[2][1]["data"]
    # set replaces the whole data: stock back to its default, note cleared, version + 1 each time
    assert (data["sku"], data["price"], data["stock"], data["note"]) == ("new-sku", "9.50", 0, None)
    assert data["version"] == it["version"] + 2
    assert got[3][0] == 422 and got[3][1]["errors"][0]["path"] == "stock"
    assert got[4][0] == 422 and got[4][1]["errors"][0]["path"] == "sku"  # required in a whole set
    assert got[5][0] == 404
    _status, answer = await srv.call("GET", f"item/{key}")
    assert answer["data"]["sku"] == "new-sku"


async def test_set_of_an_unknown_id_creates_the_record(srv: Bridged) -> None:
    import uuid

    key = str(uuid.uuid4())
    got = await results(
        srv, step("entity", "set", named="store/item", key=key, data={"sku": "fresh", "stock": 3})
    )
    assert got[0][0] == 200, got
    assert await stock(srv, {"id": key}) == 3


async def test_increment_and_decrement_rules(srv: Bridged) -> None:
    it = await item(srv, stock=2)
    key = it["id"]
    got = await results(
        srv,
        step("entity", "decrement", named="store/item", key=key, field="stock", amount=2),
        step("entity", "decrement", named="store/item", key=key, field="stock", amount=1),
        step("entity", "increment", named="store/item", key=key, field="stock", amount=5),
        step("entity", "increment", named="store/item", key=key, field="sku", amount=1),
        step("entity", "increment", named="store/item", key=key, field="stock", amount=-1),
        step(
            "entity",
            "decrement",
            named="store/item",
            key="00000000-0000-0000-0000-000000000000",
            field="stock",
            amount=1,
        ),
    )
    assert got[0] == (200, {"value": 0, "version": it["version"] + 1})
    assert got[1][0] == 409 and got[1][1]["code"] == "SVC.CTX.INSUFFICIENT"
    assert got[2] == (200, {"value": 5, "version": it["version"] + 2})  # the refused one changed nothing
    assert [g[0] for g in got[3:]] == [400, 422, 404]
    assert await stock(srv, it) == 5


async def test_db_query_is_named_filtered_and_tenant_bound(srv: Bridged) -> None:
    a = await item(srv, stock=1001)
    b = await item(srv, stock=1002)
    got = await results(
        srv,
        step("db", "query", named="store/item", filter={"stock": {"gte": 1001, "lte": 1002}}),
        step("db", "query", named="store/item", filter={"id": {"in": [a["id"]]}}),
        step("db", "query", named="store/item", filter={"stock": {"drop table": 1}}),
        step("db", "query", named="store/item", filter={"secret_column": 1}),
        step("db", "query", named="select 1"),
    )
    assert got[0][0] == 200 and sorted(r["id"] for r in got[0][1]["data"]) == sorted([a["id"], b["id"]])
    assert [r["id"] for r in got[1][1]["data"]] == [a["id"]]
    assert [g[0] for g in got[2:]] == [400, 400, 400]


async def test_cache_on_redis_and_memory_is_per_tenant(srv: Bridged) -> None:
    await srv.register("other")
    for store in ("cache", "mem"):
        got = await results(
            srv,
            step("cache", "set", named=store, key="k", value={"n": 1}, ttl_seconds=60),
            step("cache", "get", named=store, key="k"),
            step("cache", "delete", named=store, key="k"),
            step("cache", "get", named=store, key="k"),
            step("cache", "set", named=store, key="shared", value="mine"),
        )
        assert got == [
            (200, {"ok": True}),
            (200, {"value": {"n": 1}}),
            (200, {"deleted": True}),
            (200, {"value": None}),
            (200, {"ok": True}),
        ]
        theirs = await results(srv, step("cache", "get", named=store, key="shared"), ws="other")
        assert theirs == [(200, {"value": None})], store


async def test_locks_give_fencing_tokens_and_expire(srv: Bridged) -> None:
    got = await results(
        srv,
        step("lock", "acquire", named="cache", key="job", ttl_seconds=30),
        step("lock", "acquire", named="cache", key="job", ttl_seconds=30),
        step("lock", "release", named="cache", key="job", token=0),
    )
    assert got[0][0] == 200 and got[0][1]["acquired"] is True
    token = got[0][1]["token"]
    assert got[1] == (200, {"acquired": False, "token": None})
    assert got[2] == (200, {"released": False})
    got = await results(
        srv,
        step("lock", "release", named="cache", key="job", token=token),
        step("lock", "acquire", named="cache", key="job", ttl_seconds=1),
        step("lock", "acquire", named="cache", key="job"),
    )
    assert got[0] == (200, {"released": True})
    assert got[1][1]["token"] > token
    assert got[2][0] == 400  # ttl_seconds is required


async def test_datastore_refusals(srv: Bridged) -> None:
    got = await results(
        srv,
        step("cache", "set", named="readonly", key="k", value=1),  # store.* may only read
        step("cache", "get", named="readonly", key="k"),
        step("cache", "get", named="files", key="k"),  # an fs store is no cache
        step("cache", "get", named="elsewhere", key="k"),  # filtered to another workspace
        step("cache", "get", named="nope", key="k"),
        step("storage", "put", named="files", key="k"),  # no such primitive connected
        step("cache", "get", named="mem", key=""),
    )
    assert [g[0] for g in got] == [403, 200, 501, 404, 404, 501, 400]
    assert got[0][1]["code"] == "SVC.CTX.DATASTORE_DENIED"
    assert got[2][1]["code"] == "SVC.CTX.BACKEND_NOT_CONNECTED"


async def test_200_concurrent_decrements_on_a_stock_of_100(srv: Bridged) -> None:
    it = await item(srv, stock=100)
    orders = [await order(srv, it) for _ in range(200)]
    answers = await asyncio.gather(*(run(srv, o, steps=[dec(it, 1, strict=True)]) for o in orders))
    statuses = [s for s, _ in answers]
    assert statuses.count(200) == 100 and statuses.count(500) == 100, sorted(set(statuses))
    assert await stock(srv, it) == 0


async def test_an_action_whose_app_writes_its_record_answers_and_emits_the_record_after(
    srv: Bridged, pg_dsn: str
) -> None:
    """The app updates the very record its action runs on, twice, through /ctx: the answer, its
    ETag and the action's ``emits`` event carry the record as stored, so the ETag is usable."""
    it = await item(srv)
    o = await order(srv, it)
    writes = [step("entity", "update", named="store/order", key=o["id"], fields={"note": n}) for n in "ab"]
    url = f"{srv.api}/default/api/store/order/{o['id']}/touch"
    async with srv.http.post(url, json={"steps": writes}, headers=srv.auth()) as resp:
        answer = await resp.json()
        assert resp.status == 200, answer
        etag = resp.headers["ETag"]
    assert (answer["data"]["version"], answer["data"]["note"]) == (o["version"] + 2, "b")
    assert etag == f'"{o["version"] + 2}"'
    conn = await asyncpg.connect(pg_dsn)
    try:
        payload = await conn.fetchval(
            "SELECT payload FROM dap.outbox WHERE record_id = $1::uuid AND event = 'touched'", o["id"]
        )
    finally:
        await conn.close()
    assert json.loads(payload)["record"]["version"] == o["version"] + 2
    headers = {**srv.auth(), "If-Match": etag, "Content-Type": "application/json"}
    patch_url = f"{srv.api}/default/api/store/order/{o['id']}"
    async with srv.http.patch(patch_url, json={"note": "c"}, headers=headers) as resp:
        assert resp.status == 200, await resp.text()  # the answer's ETag is the current version


async def test_a_write_dated_in_a_closed_period_is_refused(srv: Bridged) -> None:
    """entity set, update and increment of a transaction entity obey the accounting periods."""
    status, answer = await srv.call("POST", "posting", {"posting_date": "2018-02-10", "amount": 1})
    assert status == 201, answer
    inside = answer["data"]
    status, answer = await srv.call("POST", "posting", {"posting_date": "2018-03-10", "amount": 1})
    assert status == 201, answer
    outside = answer["data"]
    api = f"{srv.api}/default/api/_periods"
    async with srv.http.post(
        api, json={"name": "2018-02", "starts": "2018-02-01", "ends": "2018-02-28"}, headers=srv.auth()
    ) as resp:
        period = (await resp.json())["data"]
    async with srv.http.post(
        f"{api}/{period['id']}/close", json={"reason": "booked"}, headers=srv.auth()
    ) as r:
        assert r.status == 200, await r.text()
    posting = "store/posting"
    got = await results(
        srv,
        step("entity", "set", named=posting, key=str(uuid.uuid4()), data={"posting_date": "2018-02-03"}),
        step("entity", "update", named=posting, key=inside["id"], fields={"amount": 5}),
        step("entity", "increment", named=posting, key=inside["id"], field="amount", amount=2),
        step("entity", "update", named=posting, key=outside["id"], fields={"posting_date": "2018-02-27"}),
        step("entity", "update", named=posting, key=outside["id"], fields={"amount": 7}),
    )
    assert [s for s, _ in got] == [422, 422, 422, 422, 200], got
    assert {a["code"] for s, a in got if s == 422} == {"SVC.PERIOD.CLOSED"}
    _status, answer = await srv.call("GET", f"posting/{inside['id']}")
    assert answer["data"]["amount"] == 1


async def test_a_write_of_a_summary_is_refused(srv: Bridged) -> None:
    """A summary is the engine's: /ctx set, update and increment are 409 SVC.PERSIST.CROSS_CATEGORY."""
    status, answer = await srv.call(
        "POST", "posting", {"posting_date": "2018-05-02", "account": "a", "amount": 3}
    )
    assert status == 201, answer
    status, answer = await srv.call("POST", f"posting/{answer['data']['id']}/submit")
    assert status == 200, answer
    _status, listed = await srv.call("GET", "total")
    total = next(r for r in listed["data"] if r["account"] == "a")
    assert total["amount"] == 3
    total_ = "store/total"
    got = await results(
        srv,
        step("entity", "set", named=total_, key=str(uuid.uuid4()), data={"account": "b", "amount": 1}),
        step("entity", "update", named=total_, key=total["id"], fields={"amount": 5}),
        step("entity", "increment", named=total_, key=total["id"], field="amount", amount=2),
        step("entity", "get", named=total_, key=total["id"]),
    )
    assert [s for s, _ in got] == [409, 409, 409, 200], got
    assert {a["code"] for s, a in got if s == 409} == {"SVC.PERSIST.CROSS_CATEGORY"}
    assert got[3][1]["data"]["amount"] == 3
