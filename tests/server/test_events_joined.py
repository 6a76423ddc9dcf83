"""The built-in event written by the write's own statement (``events.builtin.joined``): its payload
is the record exactly as REST answers it, the timestamps written by SQL as ``fieldvalues.iso_text``
writes them, and a row that comes out otherwise than predicted (here a trigger) still gets an event
carrying the record as it is."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server import fieldvalues
from dap.server.catalog import Catalog
from dap.server.events import builtin

from .conftest import SHOP, Running, events_of, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")


DOC = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: shop}
spec:
  lifecycle: true
  fields:
    - {name: ref, type: string, required: true}
    - {name: at, type: datetime}
  expose:
    - type: rest
"""


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load({**SHOP, "shop/order.yaml": DOC})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog) -> AsyncIterator[Running]:
    async with running(pg_dsn, catalog) as r:
        yield r


async def call(srv: Running, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with srv.http.request(
        method, f"{srv.api}/default/api/shop/{path}", json=body, headers=srv.auth()
    ) as resp:
        return resp.status, await resp.json()


REWRITTEN = "event payload rewritten"


async def test_the_event_carries_the_record_as_the_answer_shows_it(
    srv: Running, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=builtin.__name__)
    body = {"sku": "J-1", "title": "Lamp", "price": "12.50", "weight": "1.5", "launched": "2026-01-02"}
    status, created = await call(srv, "POST", "product", body)
    assert status == 201, created
    rid = created["data"]["id"]
    status, updated = await call(srv, "PATCH", f"product/{rid}", {"title": "Desk lamp", "color": "red"})
    assert status == 200, updated
    events = await events_of(pg_dsn, rid)
    assert [e["event"] for e in events] == ["created", "updated"]
    assert events[0]["record"] == created["data"]
    assert events[1]["record"] == updated["data"]
    assert events[1]["changed"] == ["color", "title"]
    assert [e["version"] for e in events] == [1, 2]
    assert not [r for r in caplog.records if REWRITTEN in r.getMessage()]  # predicted right: one statement


@pytest.mark.parametrize("submit", [False, True])
async def test_a_document_created_draft_or_submitted(
    srv: Running, pg_dsn: str, caplog: pytest.LogCaptureFixture, submit: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger=builtin.__name__)
    path = "order?submit=true" if submit else "order"
    status, created = await call(srv, "POST", path, {"ref": f"R-{submit}", "at": "2026-03-04T05:06:07+02:00"})
    assert status == 201, created
    assert created["data"]["docstatus"] == ("submitted" if submit else "draft")
    events = await events_of(pg_dsn, created["data"]["id"])
    assert [e["event"] for e in events] == ["created"]
    assert events[0]["record"] == created["data"]
    assert not [r for r in caplog.records if REWRITTEN in r.getMessage()]


@pytest.mark.parametrize(
    "moment",
    [
        dt.datetime(2026, 11, 25, 23, 59, 59, tzinfo=dt.UTC),  # no microseconds: none written
        dt.datetime(2026, 11, 25, 23, 59, 59, 120000, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        dt.datetime(1999, 12, 31, 22, 0, 0, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    ],
)
async def test_timestamps_are_written_as_iso_text_writes_them(pg_dsn: str, moment: dt.datetime) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("SET TIME ZONE 'Europe/Paris'")  # the session's zone plays no part
        text = await conn.fetchval(f"SELECT {builtin._iso('$1::timestamptz')}::text", moment)
        stored = await conn.fetchval("SELECT $1::timestamptz", moment)
    finally:
        await conn.close()
    assert json.loads(text) == fieldvalues.iso_text(stored)


async def test_a_row_unlike_its_prediction_still_gets_its_record_in_the_event(
    srv: Running, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=builtin.__name__)
    conn = await asyncpg.connect(pg_dsn)
    try:  # a trigger changes the row behind the statement's back
        await conn.execute(
            "CREATE FUNCTION shout() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN NEW.title := upper(NEW.title); RETURN NEW; END $$"
        )
        await conn.execute(
            "CREATE TRIGGER shout BEFORE INSERT OR UPDATE ON shop__product "
            "FOR EACH ROW EXECUTE FUNCTION shout()"
        )
        status, created = await call(srv, "POST", "product", {"sku": "J-2", "title": "quiet", "price": "1"})
        assert status == 201, created
        assert created["data"]["title"] == "QUIET"
        rid = created["data"]["id"]
        status, updated = await call(srv, "PATCH", f"product/{rid}", {"title": "still quiet"})
        assert status == 200, updated
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS shout ON shop__product")
        await conn.execute("DROP FUNCTION IF EXISTS shout()")
        await conn.close()
    events = await events_of(pg_dsn, rid)
    assert [e["record"]["title"] for e in events] == ["QUIET", "STILL QUIET"]
    assert events[0]["record"] == created["data"]
    assert events[1]["record"] == updated["data"]
    assert len([r for r in caplog.records if REWRITTEN in r.getMessage()]) == 2


# --- the wake: a NOTIFY only where no local dispatcher runs ---------------------------------


async def _notifications(dsn: str) -> tuple[asyncpg.Connection, list[str]]:
    got: list[str] = []
    conn = await asyncpg.connect(dsn)
    await conn.add_listener("dap_outbox", lambda *args: got.append(args[3]))
    return conn, got


async def _delivered(dsn: str, record_id: str, within: float) -> float | None:
    """Seconds until every event of ``record_id`` is delivered (``None`` past ``within``)."""
    start = time.monotonic()
    conn = await asyncpg.connect(dsn)
    try:
        while time.monotonic() - start < within:
            left = await conn.fetchval(
                "SELECT count(*) FROM dap.outbox WHERE record_id = $1 AND delivered_at IS NULL",
                uuid.UUID(record_id),
            )
            if left == 0:
                return time.monotonic() - start
            await asyncio.sleep(0.02)
        return None
    finally:
        await conn.close()


async def test_a_dispatching_process_wakes_its_own_dispatcher_without_a_notify(
    srv: Running, pg_dsn: str
) -> None:
    """A NOTIFY in the write's transaction would serialise commits (docs/performance.md): the
    process that dispatches wakes its own dispatcher after the commit, and the event is delivered
    at once -- well before the dispatcher's 1 s poll."""
    listener, got = await _notifications(pg_dsn)
    try:
        status, created = await call(srv, "POST", "product", {"sku": "W-1", "title": "Wake", "price": "1.00"})
        assert status == 201, created
        record_id = created["data"]["id"]
        took = await _delivered(pg_dsn, record_id, 5.0)
        assert took is not None and took < 0.5, took
        status, updated = await call(srv, "PATCH", f"product/{record_id}", {"title": "Woken"})
        assert status == 200, updated
        took = await _delivered(pg_dsn, record_id, 5.0)
        assert took is not None and took < 0.5, took
        assert [e["event"] for e in await events_of(pg_dsn, record_id)] == ["created", "updated"]
        assert got == []  # neither write NOTIFYed dap_outbox
    finally:
        await listener.close()


async def test_a_process_that_does_not_dispatch_still_notifies(
    pg_dsn: str, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DAP_EVENTS_DISPATCH=0``: the write NOTIFYs, so that the processes that dispatch wake."""
    monkeypatch.setenv("DAP_EVENTS_DISPATCH", "0")
    listener, got = await _notifications(pg_dsn)
    try:
        async with running(pg_dsn, catalog) as quiet:
            status, created = await call(
                quiet, "POST", "product", {"sku": "W-2", "title": "Quiet", "price": "1.00"}
            )
            assert status == 201, created
            status, _ = await call(quiet, "PATCH", f"product/{created['data']['id']}", {"title": "Still"})
            assert status == 200
        for _ in range(100):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.02)
        assert len(got) >= 2  # one NOTIFY per write's transaction
    finally:
        await listener.close()
