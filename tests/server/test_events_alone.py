"""A create whose only statement is its row and its event goes to Postgres alone, committed by
itself (``storage.deferred``, ``workflows.recording._create_alone``): one round trip instead of
``BEGIN``, the statement and ``COMMIT``, with the event as atomic as before. What needs the
transaction still gets it: a relation's ``FOR KEY SHARE`` check, an ``Idempotency-Key``, a row
unlike its prediction (the statement refuses it and the transaction path writes it), a
create-and-submit. The statements are those each pool connection logs (asyncpg query loggers)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server import state
from dap.server.access import guards
from dap.server.catalog import Catalog
from dap.server.events import builtin
from dap.server.storage import deferred

from .conftest import SHOP, Running, events_of, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOTE = """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: shop}
spec:
  fields:
    - {name: text, type: string, required: true}
    - {name: product, type: relation, relation: {entity: shop/product}}
  expose:
    - type: rest
"""


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load({**SHOP, "shop/note.yaml": NOTE})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog) -> AsyncIterator[tuple[Running, list[list[tuple[str, Any]]]]]:
    async with running(pg_dsn, catalog) as r:
        pool = r.server.app[state.POOL]
        logs: list[list[tuple[str, Any]]] = []
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        for conn in held:
            mine: list[tuple[str, Any]] = []
            logs.append(mine)
            conn.add_query_logger(lambda q, mine=mine: mine.append((q.query.strip(), tuple(q.args or ()))))
        for conn in held:
            await pool.release(conn)
        yield r, logs


def request_statements(logs: list[list[tuple[str, Any]]], marker: str) -> list[str]:
    """The statements of the request whose last write carried ``marker`` (an argument): on its
    connection, from its ``BEGIN`` to its ``COMMIT``, or the one statement alone when no ``BEGIN``
    comes after the previous request's end."""
    for queries in logs:
        for i in reversed(range(len(queries))):  # the last: a refused lone statement comes first
            if marker not in queries[i][1]:
                continue
            start = i - 1
            while start >= 0 and not queries[start][0].startswith(("BEGIN", "COMMIT", "ROLLBACK")):
                start -= 1
            if start < 0 or not queries[start][0].startswith("BEGIN"):
                return [queries[i][0]]
            end = next(j for j in range(i, len(queries)) if queries[j][0].startswith(("COMMIT", "ROLLBACK")))
            return [q for q, _ in queries[start : end + 1]]
    raise AssertionError(f"no statement carried {marker}")


async def call(r: Running, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    async with r.http.request(
        method, f"{r.api}/default/api/shop/{path}", json=body, headers={**r.auth(), **headers}
    ) as resp:
        return resp.status, await resp.json()


async def settled(logs: list[list[tuple[str, Any]]], marker: str) -> list[str]:
    await asyncio.sleep(0.05)  # the loggers run at the loop's next turn
    return request_statements(logs, marker)


async def test_a_plain_create_is_one_statement(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    body = {"sku": "A-1", "title": "Lamp", "price": "12.50", "weight": "1.5", "attrs": {"k": [1, "x"]}}
    status, created = await call(r, "POST", "product", body)
    assert status == 201, created
    sent = await settled(logs, "A-1")
    assert len(sent) == 1 and sent[0].startswith("WITH w AS (INSERT"), sent
    events = await events_of(pg_dsn, created["data"]["id"])
    assert [e["event"] for e in events] == ["created"]
    assert events[0]["record"] == created["data"]


async def test_a_value_stored_otherwise_than_sent_takes_the_transaction(srv: Any, pg_dsn: str) -> None:
    """``1.5`` into a column of scale 3 is stored ``1.500`` (unless validation already scaled it):
    either way the event carries what the answer shows."""
    r, _ = srv
    status, created = await call(
        r, "POST", "product", {"sku": "A-2", "title": "x", "price": "3.1", "rating": 2}
    )
    assert status == 201, created
    events = await events_of(pg_dsn, created["data"]["id"])
    assert events[0]["record"] == created["data"]


async def test_a_trigger_makes_the_lone_statement_refuse_and_the_transaction_write(
    srv: Any, pg_dsn: str
) -> None:
    r, logs = srv
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "CREATE FUNCTION shout_alone() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN NEW.title := upper(NEW.title); RETURN NEW; END $$"
        )
        await conn.execute(
            "CREATE TRIGGER shout_alone BEFORE INSERT ON shop__product "
            "FOR EACH ROW EXECUTE FUNCTION shout_alone()"
        )
        status, created = await call(r, "POST", "product", {"sku": "A-3", "title": "quiet", "price": "1"})
        assert status == 201, created
        rows = await conn.fetchval("SELECT count(*) FROM shop__product WHERE sku = 'A-3'")
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS shout_alone ON shop__product")
        await conn.execute("DROP FUNCTION IF EXISTS shout_alone()")
        await conn.close()
    assert rows == 1  # the refused statement wrote nothing
    sent = await settled(logs, "A-3")
    tried = [q for queries in logs for q, args in queries if "A-3" in args]
    assert len(tried) == 2, tried  # the lone statement (refused), then the same in the transaction
    assert sent[0].startswith("BEGIN") and sent[-1].startswith("COMMIT"), sent
    assert any(s.startswith("UPDATE dap.outbox SET payload") for s in sent), sent
    events = await events_of(pg_dsn, created["data"]["id"])
    assert [e["record"] for e in events] == [created["data"]]
    assert created["data"]["title"] == "QUIET"


async def test_a_relation_check_keeps_its_transaction(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    status, product = await call(r, "POST", "product", {"sku": "A-4", "title": "p", "price": "1"})
    assert status == 201, product
    status, note = await call(r, "POST", "note", {"text": "N-4", "product": product["data"]["id"]})
    assert status == 201, note
    sent = await settled(logs, "N-4")
    assert sent[0].startswith("BEGIN") and sent[-1].startswith("COMMIT"), sent
    assert any("FOR KEY SHARE" in s for s in sent), sent
    events = await events_of(pg_dsn, note["data"]["id"])
    assert [e["record"] for e in events] == [note["data"]]


async def test_a_relation_left_empty_needs_no_transaction(srv: Any) -> None:
    r, logs = srv
    status, note = await call(r, "POST", "note", {"text": "N-5"})
    assert status == 201, note
    assert len(await settled(logs, "N-5")) == 1


async def test_an_idempotency_key_keeps_its_transaction(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    body = {"sku": "A-6", "title": "k", "price": "1"}
    status, first = await call(r, "POST", "product", body, **{"Idempotency-Key": "alone-6"})
    assert status == 201, first
    status, again = await call(r, "POST", "product", body, **{"Idempotency-Key": "alone-6"})
    assert (status, again) == (201, first)
    sent = await settled(logs, "A-6")
    assert sent[0].startswith("BEGIN") and sent[-1].startswith("COMMIT"), sent
    assert len(await events_of(pg_dsn, first["data"]["id"])) == 1


async def test_a_unique_violation_alone_is_a_conflict_and_writes_nothing(srv: Any, pg_dsn: str) -> None:
    r, _ = srv
    status, first = await call(r, "POST", "product", {"sku": "A-7", "title": "u", "price": "1"})
    assert status == 201, first
    status, problem = await call(r, "POST", "product", {"sku": "A-7", "title": "v", "price": "1"})
    assert status == 409, problem
    conn = await asyncpg.connect(pg_dsn)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox "
            "WHERE entity = 'shop/product' AND payload->'record'->>'sku' = 'A-7'"
        )
    finally:
        await conn.close()
    assert count == 1


# --- the deferred transaction itself ---------------------------------------------------------


async def test_deferred_begins_at_the_first_statement_and_commits(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TEMP TABLE t_deferred (n int)")
        async with deferred.deferred(conn) as lazy:
            assert lazy.pristine
            await lazy.execute("INSERT INTO t_deferred VALUES (1)")
            assert lazy.begun and conn.is_in_transaction()
            with pytest.raises(RuntimeError):
                await lazy.alone("INSERT INTO t_deferred VALUES (2)")
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM t_deferred") == 1
        with contextlib.suppress(ZeroDivisionError):
            async with deferred.deferred(conn) as lazy:
                await lazy.execute("INSERT INTO t_deferred VALUES (3)")
                raise ZeroDivisionError
        assert await conn.fetchval("SELECT count(*) FROM t_deferred") == 1  # rolled back
    finally:
        await conn.close()


async def test_nothing_follows_a_lone_statement_but_a_refused_one_leaves_it_pristine(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TEMP TABLE t_alone (n int NOT NULL)")
        async with deferred.deferred(conn) as lazy:
            with pytest.raises(asyncpg.NotNullViolationError):
                await lazy.alone("INSERT INTO t_alone VALUES (NULL)")
            assert lazy.pristine
            await lazy.alone("INSERT INTO t_alone VALUES (1)")
            assert not conn.is_in_transaction()  # committed by itself
            with pytest.raises(RuntimeError):
                await lazy.fetchval("SELECT 1")
        assert await conn.fetchval("SELECT count(*) FROM t_alone") == 1
    finally:
        await conn.close()


async def test_refused_names_the_payload_check_only() -> None:
    exc = asyncpg.NotNullViolationError("null value")
    exc.table_name, exc.column_name = "outbox", "payload"  # type: ignore[attr-defined]
    assert builtin.refused(exc)
    other = asyncpg.NotNullViolationError("null value")
    other.table_name, other.column_name = "shop__product", "title"  # type: ignore[attr-defined]
    assert not builtin.refused(other)


# --- updates: read unlocked, written with the version read ----------------------------------


async def test_a_plain_update_is_a_read_and_one_statement(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    status, created = await call(r, "POST", "product", {"sku": "U-1", "title": "a", "price": "1"})
    assert status == 201, created
    rid = created["data"]["id"]
    status, updated = await call(r, "PATCH", f"product/{rid}", {"title": "U-1 b", "price": "2.5"})
    assert status == 200, updated
    sent = await settled(logs, "U-1 b")
    assert len(sent) == 1 and sent[0].startswith("WITH w AS (UPDATE"), sent
    assert "version = $" in sent[0]  # the version it read
    events = await events_of(pg_dsn, rid)
    assert [e["event"] for e in events] == ["created", "updated"]
    assert events[1]["record"] == updated["data"]
    assert events[1]["changed"] == ["price", "title"]


async def test_an_update_404_and_412_as_ever(srv: Any) -> None:
    r, _ = srv
    status, problem = await call(r, "PATCH", f"product/{uuid.uuid4()}", {"title": "x"})
    assert status == 404, problem
    status, created = await call(r, "POST", "product", {"sku": "U-2", "title": "a", "price": "1"})
    rid = created["data"]["id"]
    status, problem = await call(r, "PATCH", f"product/{rid}", {"title": "y"}, **{"If-Match": '"7"'})
    assert status == 412, problem
    status, ok = await call(r, "PATCH", f"product/{rid}", {"title": "z"}, **{"If-Match": '"1"'})
    assert (status, ok["data"]["version"]) == (200, 2)


async def test_an_update_whose_row_moved_after_its_read_takes_the_locked_path(
    srv: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another write lands between the unlocked read and the statement: the statement (its
    ``WHERE version``) writes nothing, and the locked path writes over the other write's row."""
    r, logs = srv
    status, created = await call(r, "POST", "product", {"sku": "U-3", "title": "a", "price": "1"})
    rid = created["data"]["id"]
    real = guards.select_for_write

    async def read_then_race(*args: Any, **kwargs: Any) -> Any:
        current = await real(*args, **kwargs)
        if not kwargs.get("lock", True):
            other = await asyncpg.connect(pg_dsn)
            try:
                await other.execute(
                    "UPDATE shop__product SET version = version + 1, qty = 42 WHERE id = $1", uuid.UUID(rid)
                )
            finally:
                await other.close()
        return current

    monkeypatch.setattr(guards, "select_for_write", read_then_race)
    status, updated = await call(r, "PATCH", f"product/{rid}", {"title": "U-3 b"})
    monkeypatch.undo()
    assert status == 200, updated
    assert (updated["data"]["qty"], updated["data"]["version"]) == (42, 3)
    tried = [q for queries in logs for q, args in queries if "U-3 b" in args]
    assert len(tried) == 2, tried  # the lone statement (nothing written), then the locked path's
    sent = await settled(logs, "U-3 b")
    assert sent[0].startswith("BEGIN") and "FOR UPDATE" in sent[1] and sent[-1].startswith("COMMIT"), sent
    events = await events_of(pg_dsn, rid)
    assert [e["event"] for e in events] == ["created", "updated"]
    assert events[1]["record"] == updated["data"]


async def test_an_update_changed_by_a_trigger_is_refused_alone_and_rewritten_locked(
    srv: Any, pg_dsn: str
) -> None:
    r, logs = srv
    status, created = await call(r, "POST", "product", {"sku": "U-4", "title": "a", "price": "1"})
    rid = created["data"]["id"]
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "CREATE FUNCTION count_up() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN NEW.qty := coalesce(NEW.qty, 0) + 1; RETURN NEW; END $$"
        )
        await conn.execute(
            "CREATE TRIGGER count_up BEFORE UPDATE ON shop__product FOR EACH ROW EXECUTE FUNCTION count_up()"
        )
        status, updated = await call(r, "PATCH", f"product/{rid}", {"title": "U-4 b"})
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS count_up ON shop__product")
        await conn.execute("DROP FUNCTION IF EXISTS count_up()")
        await conn.close()
    assert status == 200, updated
    assert (updated["data"]["qty"], updated["data"]["version"]) == (1, 2)  # counted up once
    sent = await settled(logs, "U-4 b")
    assert sent[0].startswith("BEGIN") and sent[-1].startswith("COMMIT"), sent
    events = await events_of(pg_dsn, rid)
    assert events[1]["record"] == updated["data"]


async def test_an_update_with_a_relation_commits_its_check_with_it(srv: Any, pg_dsn: str) -> None:
    r, logs = srv
    status, product = await call(r, "POST", "product", {"sku": "U-5", "title": "p", "price": "1"})
    status, note = await call(r, "POST", "note", {"text": "U-5 n"})
    rid = note["data"]["id"]
    status, updated = await call(
        r, "PATCH", f"note/{rid}", {"text": "U-5 m", "product": product["data"]["id"]}
    )
    assert status == 200, updated
    sent = await settled(logs, "U-5 m")
    assert sent[0].startswith("BEGIN") and any("FOR KEY SHARE" in s for s in sent), sent
    assert not any("FOR UPDATE" in s for s in sent), sent  # the version in the statement instead
    events = await events_of(pg_dsn, rid)
    assert events[-1]["record"] == updated["data"]


async def test_the_lone_statement_is_prepared_once_per_connection(srv: Any) -> None:
    """asyncpg's statement cache serves the joined statement again (its text is the same for the
    same set of columns): Postgres plans it once per connection, not once per create."""
    r, _ = srv
    for i in range(8):
        status, _ = await call(r, "POST", "note", {"text": f"P-{i}"})
        assert status == 201
    pool = r.server.app[state.POOL]
    held = [await pool.acquire() for _ in range(pool.get_max_size())]
    try:
        found = [
            await conn.fetch(
                "SELECT generic_plans + custom_plans AS runs FROM pg_prepared_statements "
                'WHERE statement LIKE \'WITH w AS (INSERT INTO "shop__note" ("tenant_id", "created_by", '
                '"owner", "text") %\''
            )
            for conn in held
        ]
    finally:
        for conn in held:
            await pool.release(conn)
    prepared = [row["runs"] for rows in found for row in rows]
    assert len(prepared) <= len(held) and all(len(rows) <= 1 for rows in found), found
    assert sum(prepared) >= 8  # every create ran a statement prepared before (N-5 ran it too)
