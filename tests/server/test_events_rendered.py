"""The event's record written by the statement from the row it wrote (``events.builtin.rendering``)
and the update that therefore reads nothing first (``workflows.recording._update_blind``): one
statement per plain update, the event carrying exactly the record the answer shows (every type the
rendering takes, edge values, a trigger), and 404, 412, 409 and 422 answered as the locked path
answers them. The statements are those each pool connection logs (asyncpg query loggers)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server import state
from dap.server.catalog import Catalog
from dap.server.events import builtin

from .conftest import SHOP, Running, events_of, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

TALLY = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: tally, module: shop}
spec:
  fields:
    - {name: name, type: string, required: true}
    - {name: body, type: text}
    - {name: n, type: integer}
    - {name: ok, type: boolean}
    - {name: hue, type: enum, enum_values: [red, green]}
    - {name: amount, type: money, scale: 2}
    - {name: weight, type: decimal, precision: 10, scale: 3}
    - {name: share, type: percent, scale: 2}
    - {name: day, type: date}
    - {name: at, type: datetime}
    - {name: tag, type: uuid}
    - {name: product, type: relation, relation: {entity: shop/product}}
  expose:
    - type: rest
"""
FORM = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: form, module: shop}
spec:
  lifecycle: true
  fields:
    - {name: label, type: string, required: true}
  expose:
    - type: rest
"""

Logs = list[list[tuple[str, tuple[Any, ...]]]]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load({**SHOP, "shop/tally.yaml": TALLY, "shop/form.yaml": FORM})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog) -> AsyncIterator[tuple[Running, Logs]]:
    async with running(pg_dsn, catalog) as r:
        pool = r.server.app[state.POOL]
        logs: Logs = []
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        for conn in held:
            mine: list[tuple[str, tuple[Any, ...]]] = []
            logs.append(mine)
            conn.add_query_logger(lambda q, mine=mine: mine.append((q.query.strip(), tuple(q.args or ()))))
        for conn in held:
            await pool.release(conn)
        yield r, logs


async def call(r: Running, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    async with r.http.request(
        method, f"{r.api}/default/api/shop/{path}", json=body, headers={**r.auth(), **headers}
    ) as resp:
        return resp.status, await resp.json()


async def naming(logs: Logs, since: list[int], record_id: str) -> list[str]:
    """The statements sent since ``since`` (each log's length) that carry ``record_id``, in order
    per connection (one request runs on one connection)."""
    await asyncio.sleep(0.05)  # the loggers run at the loop's next turn
    rid = uuid.UUID(record_id)
    return [q for log, start in zip(logs, since, strict=True) for q, args in log[start:] if rid in args]


def carrying(logs: Logs, since: list[int], value: Any) -> list[str]:
    """The statements sent since ``since`` with ``value`` among their arguments."""
    return [q for log, start in zip(logs, since, strict=True) for q, args in log[start:] if value in args]


def marks(logs: Logs) -> list[int]:
    return [len(log) for log in logs]


async def created(r: Running, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = await call(r, "POST", path, body)
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data


async def test_the_rendering_takes_exact_types_only(catalog: Catalog) -> None:
    assert builtin.rendering(catalog.resources["shop/tally"]) is not None
    assert builtin.rendering(catalog.resources["shop/form"]) is not None
    # a float, a time, JSON, a set of values and a masked field: the prediction keeps them
    assert builtin.rendering(catalog.resources["shop/product"]) is None
    # child rows are read after the write
    assert builtin.rendering(catalog.resources["shop/order"]) is None


async def test_a_plain_create_is_one_statement_without_a_prediction(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    since = marks(logs)
    record = await created(r, "tally", {"name": "T-0", "amount": "3", "day": "2026-01-02"})
    sent = await naming(logs, since, record["id"])
    assert sent == [], sent  # the id is the statement's, never a parameter
    sent = carrying(logs, since, "T-0")
    assert len(sent) == 1 and sent[0].startswith("WITH w AS (INSERT"), sent
    assert "THEN $" not in sent[0] and "jsonb_build_object('record'" in sent[0], sent
    events = await events_of(pg_dsn, record["id"])
    assert [(e["event"], e["record"]) for e in events] == [("created", record)]
    assert record["amount"] == "3.00"


async def test_a_plain_update_is_one_statement_and_reads_nothing(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    record = await created(r, "tally", {"name": "T-1", "amount": "1.50"})
    since = marks(logs)
    status, updated = await call(r, "PATCH", f"tally/{record['id']}", {"name": "T-1 b", "n": 3})
    assert status == 200, updated
    sent = await naming(logs, since, record["id"])
    assert len(sent) == 1 and sent[0].startswith("WITH w AS (UPDATE"), sent  # no read, no BEGIN
    assert "FOR UPDATE" not in sent[0] and "version = $" not in sent[0], sent
    events = await events_of(pg_dsn, record["id"])
    assert [(e["event"], e["version"]) for e in events] == [("created", 1), ("updated", 2)]
    assert events[1]["record"] == updated["data"]
    assert events[1]["changed"] == ["n", "name"]
    assert (updated["data"]["n"], updated["data"]["amount"]) == (3, "1.50")


@pytest.mark.parametrize(
    "values",
    [
        {"body": 'é "q" \\ \n\t<>&', "n": 9007199254740993, "ok": False, "hue": "green"},
        {"amount": "0.10", "weight": "1.5", "share": "-3"},
        {"amount": "12", "weight": "0.001", "share": "99.99"},
        {"day": "2026-02-28", "at": "2026-03-04T05:06:07.000120+02:00"},
        {"day": "0999-01-01", "at": "1999-12-31T23:59:59Z", "tag": "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0"},
        {"body": None, "n": None, "ok": None, "amount": None, "day": None, "at": None, "tag": None},
    ],
)
async def test_the_event_carries_the_record_as_the_answer_shows_it(
    srv: Any, pg_dsn: str, values: dict[str, Any]
) -> None:
    r, _ = srv
    full = {"body": "x", "n": 1, "ok": True, "amount": "2.00", "day": "2020-01-01"}
    full["at"] = "2020-01-01T00:00:00Z"
    record = await created(r, "tally", {"name": "T-2", **full, "tag": str(uuid.uuid4())})
    status, updated = await call(r, "PATCH", f"tally/{record['id']}", values)
    assert status == 200, updated
    events = await events_of(pg_dsn, record["id"])
    assert [e["record"] for e in events] == [record, updated["data"]]
    again = await created(r, "tally", {"name": "T-2 c", **values})  # the same values created
    assert [e["record"] for e in await events_of(pg_dsn, again["id"])] == [again]
    status, found = await call(r, "GET", f"tally/{record['id']}")
    assert (status, found["data"]) == (200, updated["data"])


async def test_404_412_and_422_as_the_locked_path_answers_them(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    status, problem = await call(r, "PATCH", f"tally/{uuid.uuid4()}", {"name": "x"})
    assert status == 404, problem
    record = await created(r, "tally", {"name": "T-3"})
    rid = record["id"]
    status, problem = await call(r, "PATCH", f"tally/{rid}", {"name": "y"}, **{"If-Match": '"7"'})
    assert status == 412, problem
    # a relation pointing nowhere on a record that does not exist: 404 first, as ever
    status, problem = await call(r, "PATCH", f"tally/{uuid.uuid4()}", {"product": str(uuid.uuid4())})
    assert status == 404, problem
    status, problem = await call(r, "PATCH", f"tally/{rid}", {"product": str(uuid.uuid4())})
    assert status == 422, problem
    since = marks(logs)
    status, ok = await call(r, "PATCH", f"tally/{rid}", {"name": "z"}, **{"If-Match": '"1"'})
    assert (status, ok["data"]["version"]) == (200, 2)
    sent = await naming(logs, since, rid)
    assert len(sent) == 1 and "version = $" in sent[0], sent  # If-Match checked by the statement
    events = await events_of(pg_dsn, rid)
    assert [(e["event"], e["version"]) for e in events] == [("created", 1), ("updated", 2)]


async def test_an_update_with_a_relation_commits_its_check_with_it(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    status, product = await call(r, "POST", "product", {"sku": "R-1", "title": "p", "price": "1"})
    assert status == 201, product
    record = await created(r, "tally", {"name": "T-4"})
    since = marks(logs)
    status, updated = await call(r, "PATCH", f"tally/{record['id']}", {"product": product["data"]["id"]})
    assert status == 200, updated
    sent = await naming(logs, since, record["id"])
    assert len(sent) == 1 and sent[0].startswith("WITH w AS (UPDATE"), sent
    events = await events_of(pg_dsn, record["id"])
    assert events[-1]["record"] == updated["data"]


async def test_a_trigger_changes_the_row_and_the_event_says_so_in_one_statement(
    srv: Any, pg_dsn: str
) -> None:
    r, logs = srv
    record = await created(r, "tally", {"name": "T-5", "n": 1})
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "CREATE FUNCTION tally_up() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN NEW.n := coalesce(NEW.n, 0) + 10; NEW.amount := 0.5; RETURN NEW; END $$"
        )
        await conn.execute(
            "CREATE TRIGGER tally_up BEFORE UPDATE ON shop__tally FOR EACH ROW EXECUTE FUNCTION tally_up()"
        )
        since = marks(logs)
        status, updated = await call(r, "PATCH", f"tally/{record['id']}", {"name": "T-5 b", "n": 2})
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS tally_up ON shop__tally")
        await conn.execute("DROP FUNCTION IF EXISTS tally_up()")
        await conn.close()
    assert status == 200, updated
    assert (updated["data"]["n"], updated["data"]["amount"]) == (12, "0.50")
    assert len(await naming(logs, since, record["id"])) == 1
    events = await events_of(pg_dsn, record["id"])
    assert events[-1]["record"] == updated["data"]


async def test_a_create_changed_by_a_trigger_is_still_one_statement(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "CREATE FUNCTION tally_shout() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN NEW.name := upper(NEW.name); RETURN NEW; END $$"
        )
        await conn.execute(
            "CREATE TRIGGER tally_shout BEFORE INSERT ON shop__tally "
            "FOR EACH ROW EXECUTE FUNCTION tally_shout()"
        )
        since = marks(logs)
        record = await created(r, "tally", {"name": "t-7 quiet"})
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS tally_shout ON shop__tally")
        await conn.execute("DROP FUNCTION IF EXISTS tally_shout()")
        await conn.close()
    assert record["name"] == "T-7 QUIET"
    sent = carrying(logs, since, "t-7 quiet")
    assert len(sent) == 1, sent  # nothing refused, nothing rewritten
    events = await events_of(pg_dsn, record["id"])
    assert [e["record"] for e in events] == [record]


async def test_a_document_past_draft_is_409_and_a_draft_one_statement(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    draft = await created(r, "form", {"label": "F-1"})
    since = marks(logs)
    status, updated = await call(r, "PATCH", f"form/{draft['id']}", {"label": "F-1 b"})
    assert (status, updated["data"]["docstatus"]) == (200, "draft"), updated
    sent = await naming(logs, since, draft["id"])
    assert len(sent) == 1 and "docstatus = 0" in sent[0], sent
    events = await events_of(pg_dsn, draft["id"])
    assert events[-1]["record"] == updated["data"]
    submitted = await created(r, "form?submit=true", {"label": "F-2"})
    status, problem = await call(r, "PATCH", f"form/{submitted['id']}", {"label": "F-2 b"})
    assert (status, problem["code"]) == (409, "SVC.DOC.UPDATE_NOT_DRAFT"), problem
    assert [e["event"] for e in await events_of(pg_dsn, submitted["id"])] == ["created"]


async def test_concurrent_updates_each_get_one_event_in_version_order(srv: Any, pg_dsn: str) -> None:
    """Blind updates of one row wait for each other in Postgres (the row's lock within the
    statement): every answer is 2xx, versions 2..n+1 each once, one event per version."""
    r, _ = srv
    record = await created(r, "tally", {"name": "T-6", "n": 0})
    answers = await asyncio.gather(
        *(call(r, "PATCH", f"tally/{record['id']}", {"n": i}) for i in range(1, 13))
    )
    assert all(status == 200 for status, _ in answers), answers
    versions = sorted(a["data"]["version"] for _, a in answers)
    assert versions == list(range(2, 14))
    events = await events_of(pg_dsn, record["id"])
    assert [e["version"] for e in events] == list(range(1, 14))
    by_version = {a["data"]["version"]: a["data"] for _, a in answers}
    assert all(e["record"] == by_version[e["version"]] for e in events[1:])
