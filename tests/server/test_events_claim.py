"""What the dispatcher costs per event (issue 27): its claim reads the payload as text and decodes
only the payloads of events it delivers somewhere (most built-in events have no delivery), and a
row's delivery writes its new version on the row's own page (the outbox's fill factor leaves
room), so that Postgres logs the changed bytes rather than the whole row again."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap.server.events import channels, dispatcher, outbox
from dap.server.storage import db

from .conftest import dispatcher_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

PAYLOAD = {"record": {"code": "C0000001", "title": "an item " * 20, "price": "12.50", "qty": 3}}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[Any]:
    opened = await db.open_pool(pg_dsn, 2)
    try:
        async with db.connection(opened) as conn:
            await outbox.ensure_schema(conn)
        yield opened
    finally:
        await opened.close()


async def emit(conn: Any, tenant: uuid.UUID, n: int) -> list[int]:
    """``n`` undeclared events (no deliveries), each of its own record, in one statement."""
    rows = await conn.fetch(
        "INSERT INTO dap.outbox (tenant_id, entity, record_id, action, event, payload, version) "
        "SELECT $1, 'kx/thing', gen_random_uuid(), 'create', 'created', $2::jsonb, 1 "
        "FROM generate_series(1, $3) RETURNING id",
        tenant,
        PAYLOAD,
        n,
    )
    return [r["id"] for r in rows]


class CountingJson:
    """Its ``loads`` stands in for the dispatcher's ``decode_payload``: counts the payloads it decodes."""

    def __init__(self) -> None:
        self.decoded = 0

    def loads(self, text: str) -> Any:
        self.decoded += 1
        return json.loads(text)


async def test_the_claim_reads_payloads_as_text_and_decodes_none_without_deliveries(
    pool: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = uuid.uuid4()
    async with db.connection(pool) as conn:  # a connection whose jsonb codec decodes
        ids = await emit(conn, tenant, 5)
        async with conn.transaction():
            rows = await conn.fetch(dispatcher.CLAIM, 100, [tenant])
        assert [r["id"] for r in rows] == ids
        assert all(isinstance(r["payload"], str) and json.loads(r["payload"]) == PAYLOAD for r in rows)
        counting = CountingJson()
        monkeypatch.setattr(dispatcher, "decode_payload", counting.loads)
        assert await dispatcher_for(pool, pg_dsn, tenant).drain_once() == 5
        assert counting.decoded == 0
        delivered = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE id = ANY($1::bigint[]) AND seq IS NOT NULL", ids
        )
        assert delivered == 5
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)


async def test_an_event_with_a_delivery_gets_its_payload_decoded(
    pool: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same claim row, with a delivery planned: the event the channel is given carries the
    payload as the jsonb codec decodes it (here a replay naming a websocket consumer)."""
    tenant = uuid.uuid4()
    async with db.connection(pool) as conn:
        (first,) = await emit(conn, tenant, 1)
        async with conn.transaction():
            (row,) = await conn.fetch(dispatcher.CLAIM, 100, [tenant])
        plain = await conn.fetchrow("SELECT * FROM dap.outbox WHERE id = $1", first)
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
    assert channels.Event.of(row, json.loads(row["payload"])) == channels.Event.of(plain)


async def test_a_delivery_writes_the_rows_new_version_on_its_own_page(pool: Any, pg_dsn: str) -> None:
    tenant = uuid.uuid4()
    async with db.connection(pool) as conn:
        ids = await emit(conn, tenant, 200)  # several pages of rows, as full as inserts leave them
        pages = {
            r["id"]: r["page"]
            for r in await conn.fetch(
                "SELECT id, (ctid::text::point)[0] AS page FROM dap.outbox WHERE id = ANY($1::bigint[])", ids
            )
        }
        work = dispatcher_for(pool, pg_dsn, tenant)
        while await work.drain_once():
            pass
        after = {
            r["id"]: r["page"]
            for r in await conn.fetch(
                "SELECT id, (ctid::text::point)[0] AS page FROM dap.outbox "
                "WHERE id = ANY($1::bigint[]) AND seq IS NOT NULL",
                ids,
            )
        }
        await conn.execute("DELETE FROM dap.outbox WHERE tenant_id = $1", tenant)
    assert len(after) == 200
    stayed = sum(1 for i in ids if after[i] == pages[i])
    assert stayed >= 180, f"{stayed} of 200 rows kept their page when delivered"
