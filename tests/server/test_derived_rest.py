"""Derived values over real HTTP and Postgres: computed, auto_fill, child rows, *_when, rules, conditions."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio

from dap.server import state

from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "buy/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: buy}\nspec: {title: Buying}\n",
    "buy/item.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: buy}
spec:
  fields:
    - {name: code, type: string, required: true}
    - {name: unit_price, type: money, scale: 2}
    - {name: region, type: string}
  expose: [{type: rest}]
""",
    "buy/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: buy}
spec:
  lifecycle: true
  fields:
    - name: number
      type: string
      natural_key: true
      natural_key_rule: {pattern: "PO-{YYYY}-{#####}", reset: yearly}
      read_only: true
    - {name: item, type: relation, relation: {entity: buy/item}}
    - {name: region, type: string, auto_fill: {from: item, field: region}}
    - {name: kind, type: enum, enum_values: [standard, rush], default: standard}
    - {name: reason, type: text, required_when: "kind == 'rush'", visible_when: "kind == 'rush'"}
    - {name: locked, type: boolean, default: false}
    - {name: memo, type: string, readonly_when: "locked"}
    - name: code
      type: string
      rules: [{rule: pattern, value: "^[A-Z]{3}$", message: Three capital letters.}]
    - {name: divisor, type: integer}
    - {name: per_unit, type: decimal, scale: 2, computed: {formula: "total / divisor"}}
    - name: lines
      type: child
      child:
        storage: table
        sequence_field: idx
        picker: {entity: buy/item, map: {id: item, unit_price: unit_price}}
        fields:
          - {name: idx, type: integer}
          - {name: item, type: relation, required: true, relation: {entity: buy/item}}
          - {name: qty, type: decimal, precision: 12, scale: 3, required: true}
          - name: unit_price
            type: money
            scale: 2
            required: true
            auto_fill: {from: item, field: unit_price}
          - {name: amount, type: money, scale: 2, computed: {formula: "round(qty * unit_price, 2)"}}
    - {name: total, type: money, scale: 2, computed: {formula: "sum(lines.amount)"}}
  actions:
    - name: create
      conditions: [{script: "count(lines) <= 3", message: At most three lines.}]
    - name: update
      conditions: [{script: "memo != 'frozen'", message: A frozen order cannot change.}]
    - name: delete
      conditions: [{field: memo, expression: "memo != 'keep'", message: The memo says keep.}]
    - name: submit
      conditions: [{script: "total > 0", message: An order needs a positive total before submit.}]
    - name: cancel
      conditions: [{script: "memo != 'hold'", message: The order is on hold.}]
  expose: [{type: rest}]
""",
    "buy/note.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: buy}
spec:
  fields:
    - {name: title, type: string}
    - name: lines
      type: child
      child:
        storage: jsonb
        sequence_field: pos
        fields:
          - {name: pos, type: integer}
          - {name: text, type: string}
          - {name: qty, type: integer}
          - {name: double, type: integer, computed: {formula: "qty * 2"}}
    - {name: doubled, type: integer, computed: {formula: "sum(lines.double)"}}
  expose: [{type: rest}]
""",
}

API = "/default/api/buy"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(SPEC)) as r:
        await r.register("other")
        yield r


async def call(
    srv: Running, method: str, path: str, body: Any = None, *, ws: str = "default", **headers: str
) -> tuple[int, Any]:
    url = srv.api + path.replace("/default/", f"/{ws}/", 1)
    async with srv.http.request(method, url, json=body, headers={**srv.auth(), **headers}) as resp:
        text = await resp.text()
        return resp.status, (await resp.json(content_type=None)) if text else None


async def item(srv: Running, code: str, price: str, region: str | None = None, ws: str = "default") -> str:
    status, body = await call(
        srv, "POST", f"{API}/item", {"code": code, "unit_price": price, "region": region}, ws=ws
    )
    assert status == 201, body
    return str(body["data"]["id"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def items(srv: Running) -> dict[str, str]:
    return {"a": await item(srv, "A", "2.50", "north"), "b": await item(srv, "B", "0.10")}


async def order(srv: Running, **body: Any) -> dict[str, Any]:
    status, answer = await call(srv, "POST", f"{API}/order", body)
    assert status == 201, answer
    return dict(answer["data"])


# --- computed and auto_fill ------------------------------------------------------------------------


async def test_create_fills_computes_and_numbers(srv: Running, items: dict[str, str]) -> None:
    lines = [{"item": items["a"], "qty": "3"}, {"item": items["b"], "qty": "0.333", "unit_price": "1.05"}]
    data = await order(srv, item=items["a"], divisor=3, lines=lines)
    assert re.fullmatch(rf"PO-{dt.datetime.now(dt.UTC).year}-\d{{5}}", data["number"])
    assert data["region"] == "north"  # auto_fill of the record from its item
    assert [(r["idx"], r["unit_price"], r["amount"]) for r in data["lines"]] == [
        (1, "2.50", "7.50"),  # filled from the item
        (2, "1.05", "0.35"),  # the payload's own price is kept; 0.34965 rounds half up
    ]
    assert data["total"] == "7.85"
    assert data["per_unit"] == "2.62"
    # stored in their columns, exact
    pool = srv.server.app[state.POOL]
    row = await pool.fetchrow('SELECT total, per_unit FROM "buy__order" WHERE id = $1', uuid.UUID(data["id"]))
    assert (row["total"], row["per_unit"]) == (Decimal("7.85"), Decimal("2.62"))
    amounts = await pool.fetch(
        'SELECT idx, amount FROM "buy__order__lines" WHERE parent_id = $1 ORDER BY idx', uuid.UUID(data["id"])
    )
    assert [(r["idx"], r["amount"]) for r in amounts] == [(1, Decimal("7.50")), (2, Decimal("0.35"))]
    status, found = await call(srv, "GET", f"{API}/order/{data['id']}")
    assert status == 200
    assert found["data"]["total"] == "7.85"
    assert found["data"]["lines"] == data["lines"]


async def test_computed_fields_cannot_be_written(srv: Running) -> None:
    status, body = await call(srv, "POST", f"{API}/order", {"total": "1.00"})
    assert status == 422
    assert body["errors"] == [{"path": "total", "message": "is read-only"}]


async def test_an_evaluation_error_is_422_naming_the_field(srv: Running, items: dict[str, str]) -> None:
    status, body = await call(srv, "POST", f"{API}/order", {"divisor": 0, "lines": []})
    assert status == 422
    assert body["code"] == "SVC.VALIDATE.FORMULA_FAILED"
    assert [e["path"] for e in body["errors"]] == ["per_unit"]
    assert "division by zero" in body["errors"][0]["message"].lower()


async def test_update_recomputes_over_the_merged_record(srv: Running, items: dict[str, str]) -> None:
    data = await order(srv, divisor=2, lines=[{"item": items["a"], "qty": "2"}])
    assert (data["total"], data["per_unit"]) == ("5.00", "2.50")
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"divisor": 4})
    assert status == 200, body
    assert (body["data"]["total"], body["data"]["per_unit"]) == ("5.00", "1.25")  # stored rows aggregated
    status, body = await call(
        srv, "PATCH", f"{API}/order/{data['id']}", {"lines": [{"item": items["b"], "qty": "5"}]}
    )
    assert status == 200, body
    assert [(r["idx"], r["unit_price"], r["amount"]) for r in body["data"]["lines"]] == [(1, "0.10", "0.50")]
    assert (body["data"]["total"], body["data"]["per_unit"]) == ("0.50", "0.13")  # 0.125 half up


async def test_auto_fill_follows_a_changed_relation(srv: Running, items: dict[str, str]) -> None:
    other = await item(srv, "C", "1.00", "south")
    data = await order(srv, item=items["a"])
    assert data["region"] == "north"
    url = f"{API}/order/{data['id']}"
    for payload, region in [
        ({"region": "west"}, "west"),
        ({"item": items["a"]}, "west"),  # the relation did not change: nothing copied
        ({"item": other}, "south"),
        ({"item": items["a"], "region": "mine"}, "mine"),  # the payload carries the value: it is kept
    ]:
        status, body = await call(srv, "PATCH", url, payload)
        assert status == 200, body
        assert body["data"]["region"] == region, payload


async def test_auto_fill_reads_the_same_workspace_only(srv: Running) -> None:
    foreign = await item(srv, "F", "9.99", "far", ws="other")
    status, body = await call(srv, "POST", f"{API}/order", {"lines": [{"item": foreign, "qty": "1"}]})
    assert status == 422  # the relation itself is refused before anything is copied through it
    assert body["errors"] == [
        {"path": "lines[0].item", "message": "no such related record in this workspace"}
    ]


# --- child rows ------------------------------------------------------------------------------------


async def test_table_rows_are_ordered_by_their_sequence(srv: Running, items: dict[str, str]) -> None:
    lines = [{"idx": 30, "item": items["a"], "qty": "1"}, {"idx": 10, "item": items["b"], "qty": "1"}]
    data = await order(srv, lines=lines)
    assert [r["idx"] for r in data["lines"]] == [10, 30]
    status, body = await call(srv, "GET", f"{API}/order?fields=lines&id={data['id']}")
    assert status == 200
    assert [r["idx"] for r in body["data"][0]["lines"]] == [10, 30]
    status, body = await call(
        srv, "POST", f"{API}/order", {"lines": [lines[0], {"item": items["a"], "qty": "1"}]}
    )
    assert status == 422
    assert body["errors"][0]["path"] == "lines"


async def test_jsonb_rows_are_numbered_and_ordered(srv: Running) -> None:
    status, body = await call(
        srv, "POST", f"{API}/note", {"lines": [{"text": "x", "qty": 1}, {"text": "y", "qty": 4}]}
    )
    assert status == 201, body
    assert [(r["pos"], r["text"], r["double"]) for r in body["data"]["lines"]] == [(1, "x", 2), (2, "y", 8)]
    assert body["data"]["doubled"] == 10
    rows = [{"pos": 2, "text": "b", "qty": 1}, {"pos": 1, "text": "a", "qty": 1}]
    status, body = await call(srv, "PATCH", f"{API}/note/{body['data']['id']}", {"lines": rows})
    assert status == 200, body
    assert [r["text"] for r in body["data"]["lines"]] == ["a", "b"]
    assert body["data"]["doubled"] == 4
    # rows left out of the payload are read back from the jsonb column and aggregated as stored
    status, body = await call(srv, "PATCH", f"{API}/note/{body['data']['id']}", {"title": "renamed"})
    assert status == 200, body
    assert body["data"]["doubled"] == 4
    assert [r["pos"] for r in body["data"]["lines"]] == [1, 2]


async def test_a_refused_create_writes_nothing(srv: Running, items: dict[str, str]) -> None:
    pool = srv.server.app[state.POOL]
    before = await pool.fetchval(
        'SELECT (SELECT count(*) FROM "buy__order") + (SELECT count(*) FROM "buy__order__lines")'
    )
    counter = "SELECT coalesce(sum(value), 0) FROM dap.natural_key_counters WHERE table_name = 'buy__order'"
    taken = await pool.fetchval(counter)
    status, _ = await call(
        srv, "POST", f"{API}/order", {"kind": "rush", "lines": [{"item": items["a"], "qty": "1"}]}
    )
    assert status == 422  # reason is required
    after = await pool.fetchval(
        'SELECT (SELECT count(*) FROM "buy__order") + (SELECT count(*) FROM "buy__order__lines")'
    )
    assert after == before
    assert await pool.fetchval(counter) == taken


# --- required_when, readonly_when, rules -----------------------------------------------------------


async def test_required_when_readonly_when_and_rules(srv: Running) -> None:
    status, body = await call(srv, "POST", f"{API}/order", {"kind": "rush", "code": "abc"})
    assert status == 422
    assert {e["path"]: e["message"] for e in body["errors"]} == {
        "reason": "is required (required_when kind == 'rush')",
        "code": "Three capital letters.",
    }
    status, body = await call(srv, "POST", f"{API}/order", {"locked": True, "memo": "m"})
    assert status == 422  # on create the new record decides: locked, so memo keeps its default
    assert [e["path"] for e in body["errors"]] == ["memo"]
    data = await order(srv, kind="rush", reason="late", code="ABC", memo="m")
    assert (await call(srv, "PATCH", f"{API}/order/{data['id']}", {"locked": True}))[0] == 200
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"memo": "changed"})
    assert status == 422
    assert body["errors"][0]["path"] == "memo"
    assert "is read-only while locked" in body["errors"][0]["message"]
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"locked": False})
    assert status == 200
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"memo": "changed", "reason": None})
    assert status == 422  # unlocked now, but the stored kind still requires a reason
    assert [e["path"] for e in body["errors"]] == ["reason"]
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"memo": "changed"})
    assert status == 200
    assert body["data"]["memo"] == "changed"


# --- conditions of standard actions ----------------------------------------------------------------


async def test_submit_condition(srv: Running, items: dict[str, str]) -> None:
    empty = await order(srv)
    status, body = await call(srv, "POST", f"{API}/order/{empty['id']}/submit")
    assert status == 422
    assert body["code"] == "SVC.ACTION.CONDITION_FAILED"
    assert body["detail"] == "An order needs a positive total before submit."
    assert body["errors"] == [{"path": "submit", "message": "An order needs a positive total before submit."}]
    full = await order(srv, lines=[{"item": items["a"], "qty": "1"}])
    status, body = await call(srv, "POST", f"{API}/order/{full['id']}/submit")
    assert status == 200, body
    assert body["data"]["docstatus"] == "submitted"


async def test_create_and_submit_checks_both_guards(srv: Running, items: dict[str, str]) -> None:
    status, body = await call(srv, "POST", f"{API}/order?submit=true", {})
    assert status == 422
    assert body["code"] == "SVC.ACTION.CONDITION_FAILED"
    lines = [{"item": items["a"], "qty": "1"}] * 4
    status, body = await call(srv, "POST", f"{API}/order", {"lines": lines})
    assert status == 422
    assert body["detail"] == "At most three lines."


async def test_update_delete_and_cancel_conditions(srv: Running, items: dict[str, str]) -> None:
    data = await order(srv, memo="keep")
    status, body = await call(srv, "DELETE", f"{API}/order/{data['id']}")
    assert status == 422
    assert body["errors"] == [{"path": "memo", "message": "The memo says keep."}]
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"memo": "frozen"})
    assert status == 200  # the guard reads the record before the update
    status, body = await call(srv, "PATCH", f"{API}/order/{data['id']}", {"memo": "thawed"})
    assert status == 422
    assert body["detail"] == "A frozen order cannot change."
    held = await order(srv, memo="hold", lines=[{"item": items["a"], "qty": "1"}])
    assert (await call(srv, "POST", f"{API}/order/{held['id']}/submit"))[0] == 200
    status, body = await call(srv, "POST", f"{API}/order/{held['id']}/cancel")
    assert status == 422
    assert body["detail"] == "The order is on hold."
    deletable = await order(srv, memo="go")
    assert (await call(srv, "DELETE", f"{API}/order/{deletable['id']}"))[0] == 204


# --- UI metadata -----------------------------------------------------------------------------------


async def test_ui_metadata_describes_derivations(srv: Running) -> None:
    status, body = await call(srv, "GET", "/default/_ui/_meta/entities/buy/order")
    assert status == 200
    fields = {f["name"]: f for f in body["data"]["fields"]}
    lines = fields["lines"]["child"]
    assert lines["sequence_field"] == "idx"
    assert lines["picker"] == {
        "entity": "buy/item",
        "map": {"id": "item", "unit_price": "unit_price"},
        "multiple": True,
        "filters": [],
    }
    row = {f["name"]: f for f in lines["fields"]}
    assert row["amount"]["computed"] == {"formula": "round(qty * unit_price, 2)"}
    assert row["amount"]["read_only"] is True
    assert row["unit_price"]["auto_fill"] == {"from": "item", "field": "unit_price"}
    assert fields["reason"]["required_when"] == "kind == 'rush'"
    assert fields["reason"]["visible_when"] == "kind == 'rush'"
    assert fields["memo"]["readonly_when"] == "locked"
    assert fields["code"]["rules"] == [
        {"rule": "pattern", "value": "^[A-Z]{3}$", "message": "Three capital letters."}
    ]
    actions = {a["name"]: a for a in body["data"]["actions"]}
    assert actions["submit"]["conditions"] == [
        {"script": "total > 0", "message": "An order needs a positive total before submit."}
    ]
