"""The find-by-id read-through cache of entities that declare ``cache: {ttl}``.

What is proven here, against the real Postgres and real HTTP:

* the Postgres/asyncpg ordering the freshness barrier stands on (a notification committed before
  a round trip on the listening connection is applied before that round trip returns);
* the barrier itself: a write committed while the process could not read its notification is
  still never served stale (the event loop is blocked during the write, deterministically);
* announcements are transactional (a rolled back write invalidates nothing);
* two servers on one database: a write through one is never followed by a stale read through
  the other, for updates, child rows, submit/cancel, deletes and ``on_delete`` effects, also
  under concurrent readers, and across a spawned ``dap serve`` process;
* the listener connection killed: no hit is served until it is back, then the cache works again;
* the pure bookkeeping (stamps, floor, tenants, catalog identity) without a database.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from dap.server import state
from dap.server.storage import caching

from .conftest import SECRET, SHOP, Running, load, running

CACHED = dict(SHOP)
CACHED["shop/review.yaml"] = SHOP["shop/review.yaml"].replace("  expose:", "  cache: {ttl: 1s}\n  expose:")

# a spec of our own: cached entities with child rows, relations with every on_delete effect that
# changes a cached answer, and a lifecycle document
CQ = {
    "cq/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: cq}\nspec: {title: Cache}\n",
    "cq/entities.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: holder, module: cq}
spec:
  fields:
    - {name: name, type: string}
  expose:
    - type: rest
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: cq}
spec:
  cache: {ttl: 1h}
  fields:
    - {name: title, type: string}
    - {name: qty, type: integer}
    - {name: holder, type: relation, relation: {entity: cq/holder, on_delete: set_null}}
    - name: lines
      type: child
      child:
        storage: table
        fields:
          - {name: text, type: string}
          - {name: amount, type: money, scale: 2}
          - {name: about, type: relation, relation: {entity: cq/holder, on_delete: set_null}}
  expose:
    - type: rest
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: pin, module: cq}
spec:
  cache: {ttl: 1h}
  fields:
    - {name: holder, type: relation, relation: {entity: cq/holder, on_delete: cascade}}
  expose:
    - type: rest
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: doc, module: cq}
spec:
  cache: {ttl: 1h}
  lifecycle: true
  fields:
    - {name: title, type: string}
  expose:
    - type: rest
""",
}


# a refusal by Postgres itself (class 22, answered 422) of a child row written after the main row
REFUSE_LINE = """
CREATE OR REPLACE FUNCTION refuse_line() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.text = 'refused' THEN RAISE EXCEPTION 'refused line' USING ERRCODE = '22023'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_line BEFORE INSERT ON cq__note__lines FOR EACH ROW EXECUTE FUNCTION refuse_line();
"""


# --- helpers -----------------------------------------------------------------------------------


async def _call(
    srv: Running, method: str, path: str, body: Any = None, ws: str = "default"
) -> tuple[int, Any]:
    async with srv.http.request(method, f"{srv.api}/{ws}/api/{path}", json=body, headers=srv.auth()) as resp:
        text = await resp.text()
        return resp.status, (await resp.json(content_type=None)) if text else None


async def _ok(srv: Running, method: str, path: str, body: Any = None) -> dict[str, Any]:
    status, doc = await _call(srv, method, path, body)
    assert status in (200, 201), doc
    data: dict[str, Any] = doc["data"]
    return data


async def _find(srv: Running, path: str) -> dict[str, Any]:
    return await _ok(srv, "GET", path)


def _cache(srv: Running) -> caching.FindCache:
    return srv.server.app[state.CACHE]


async def _until(predicate: Any, limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _behind_the_back(dsn: str, statement: str, *args: Any) -> None:
    """A change no server announces (plain SQL): shows whether an answer came from a cache."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def _cached(srv: Running, path: str) -> dict[str, Any]:
    """Find ``path`` until ``srv`` answers it from its cache; that answer."""
    await _until(lambda: _cache(srv).live)
    for _ in range(3):
        first = await _find(srv, path)
        hits = _cache(srv).hits
        again = await _find(srv, path)
        if _cache(srv).hits > hits:
            assert again == first
            return again
    raise AssertionError(f"{path} was never answered from the cache")


@pytest.fixture
async def pair(pg_dsn: str) -> AsyncIterator[tuple[Running, Running]]:
    catalog = load(CQ)
    async with running(pg_dsn, catalog) as one, running(pg_dsn, catalog) as two:
        await _until(lambda: _cache(one).live and _cache(two).live)
        yield one, two


# --- pure bookkeeping --------------------------------------------------------------------------


def test_ttl_is_clamped() -> None:
    assert caching.ttl_seconds(None) is None
    assert caching.ttl_seconds("300s") == 300
    assert caching.ttl_seconds("2h") == caching.MAX_TTL
    assert caching.ttl_seconds("10ms") == caching.MIN_TTL


def _key(table: str = "t", tenant: uuid.UUID | None = None) -> caching.Key:
    return (table, tenant or uuid.uuid4(), uuid.uuid4())


def _put(
    cache: caching.FindCache, key: caching.Key, epoch: int, body: bytes = b"b", catalog: Any = None
) -> None:
    cache.put(key, epoch=epoch, ttl=10, catalog=catalog, body=body, etag='"1"')


def test_a_read_racing_a_write_is_not_cached() -> None:
    cache = caching.FindCache()
    cache.reset(live=True)
    key, other = _key(), _key()
    epoch = cache.epoch  # a find starts reading ...
    cache.invalidate(key)  # ... a write of that record commits meanwhile ...
    _put(cache, key, epoch, "old")  # ... the stale read is dropped
    assert cache.peek(key, None) is None
    _put(cache, other, epoch)  # another record's read is not affected
    assert cache.peek(other, None) is not None
    _put(cache, key, cache.epoch, "new")
    assert cache.peek(key, None) is not None and cache.peek(key, object()) is None  # other catalog: miss


def test_table_invalidation_is_per_tenant() -> None:
    cache = caching.FindCache()
    cache.reset(live=True)
    a, b = uuid.uuid4(), uuid.uuid4()
    in_a, in_b, elsewhere = _key("t", a), _key("t", b), _key("u", a)
    epoch = cache.epoch
    for key in (in_a, in_b, elsewhere):
        _put(cache, key, epoch)
    cache.drop_table("t", a)
    assert cache.peek(in_a, None) is None
    assert cache.peek(in_b, None) is not None and cache.peek(elsewhere, None) is not None
    _put(cache, _key("t", a), epoch)  # a read of that table and tenant begun before: refused
    assert len(cache) == 2
    cache.drop_table("t")  # every tenant
    assert cache.peek(in_b, None) is None and cache.peek(elsewhere, None) is not None


def test_nothing_is_served_or_stored_while_not_listening() -> None:
    cache = caching.FindCache()
    key = _key()
    _put(cache, key, cache.epoch)  # never started: refused
    assert len(cache) == 0
    cache.reset(live=True)
    epoch = cache.epoch
    _put(cache, key, epoch)
    assert cache.peek(key, None) is not None
    cache.reset(live=False)  # the listener went down: everything goes
    assert cache.peek(key, None) is None and len(cache) == 0
    _put(cache, key, cache.epoch)
    assert len(cache) == 0
    down_epoch = cache.epoch  # a read begun while down ...
    cache.reset(live=True)  # ... finishes after the listener is back: it may have missed writes
    _put(cache, key, down_epoch)
    assert len(cache) == 0


def test_forgotten_stamps_refuse_older_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caching, "MAX_STAMPS", 3)
    cache = caching.FindCache()
    cache.reset(live=True)
    victim = _key()
    early = cache.epoch
    cache.invalidate(victim)
    for _ in range(5):  # past MAX_STAMPS the remembered invalidations are forgotten
        cache.invalidate(_key())
    _put(cache, victim, early)  # ... yet the racing read of the victim is still refused
    assert cache.peek(victim, None) is None
    _put(cache, victim, cache.epoch)
    assert cache.peek(victim, None) is not None


def test_announcement_payloads_round_trip() -> None:
    tenant, record = uuid.uuid4(), uuid.uuid4()
    assert caching.parse(f"{tenant} {record} shop__item") == ("shop__item", tenant, record)
    assert caching.parse(f"{tenant} * shop__item") == ("shop__item", tenant, None)
    assert caching.parse("garbage") is None and caching.parse(f"x {record} t") is None


# --- the listener, the barrier and Postgres ----------------------------------------------------


async def test_postgres_delivers_committed_notifications_before_the_next_answer(pg_dsn: str) -> None:
    """The barrier's foundation, checked on the server the tests run against."""
    listener = await asyncpg.connect(pg_dsn)
    writers = [await asyncpg.connect(pg_dsn) for _ in range(3)]
    seen: set[str] = set()
    try:
        await listener.add_listener("order_check", lambda _c, _p, _ch, payload, /: seen.add(str(payload)))
        for i in range(300):
            writer = writers[i % len(writers)]
            async with writer.transaction():
                await writer.execute("SELECT pg_notify('order_check', $1)", str(i))
            await listener.execute("SELECT 1")
            assert str(i) in seen, f"notification {i} arrived after the round trip"
    finally:
        for conn in (listener, *writers):
            await conn.close()


def _commit_announcement_blocking(dsn: str, table: str, tenant: uuid.UUID, record: uuid.UUID) -> None:
    """Commit an announcement from another thread while this thread (and its event loop) waits."""

    async def write() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_notify($1, $2)", caching.CHANNEL, f"{tenant} {record} {table}")
        finally:
            await conn.close()

    worker = threading.Thread(target=asyncio.run, args=(write(),))
    worker.start()
    worker.join()


async def _started(dsn: str) -> caching.FindCache:
    cache = caching.FindCache(dsn)
    assert cache.listener is not None
    cache.listener.start()
    await _until(lambda: cache.live)
    return cache


async def test_a_hit_waits_for_writes_committed_before_it(pg_dsn: str) -> None:
    cache = await _started(pg_dsn)
    assert cache.listener is not None
    try:
        for _ in range(20):
            key = _key("cq__note")
            _put(cache, key, cache.epoch)
            # the write commits while this process cannot read its notification: the notification
            # sits unread on the listener's socket when the next find arrives
            _commit_announcement_blocking(pg_dsn, *key)
            assert cache.peek(key, None) is not None, (
                "the notification was read early; the test proves nothing"
            )
            assert await cache.lookup(key, None) is None
            assert cache.peek(key, None) is None
    finally:
        await cache.listener.stop()


async def test_concurrent_hits_share_one_round_trip(pg_dsn: str) -> None:
    cache = await _started(pg_dsn)
    listener = cache.listener
    assert listener is not None
    trips = 0
    real = listener._round_trip

    async def counted() -> bool:
        nonlocal trips
        trips += 1
        return await real()

    listener._round_trip = counted  # type: ignore[method-assign]
    try:
        key = _key()
        _put(cache, key, cache.epoch)
        hits = await asyncio.gather(*(cache.lookup(key, None) for _ in range(50)))
        assert all(h is not None for h in hits)
        assert 1 <= trips <= 2  # the first hit's trip, and one that starts after it for all the others
    finally:
        await listener.stop()


async def test_a_rolled_back_announcement_invalidates_nothing(pg_dsn: str) -> None:
    catalog = load(CQ)
    note = catalog.resources["cq/note"]
    cache = await _started(pg_dsn)
    assert cache.listener is not None
    conn = await asyncpg.connect(pg_dsn)
    try:
        key = (note.table.name, uuid.uuid4(), uuid.uuid4())
        _put(cache, key, cache.epoch, catalog=catalog)
        with pytest.raises(RuntimeError):
            await caching.announce(conn, note, key[1], key[2])  # outside a transaction: refused
        tx = conn.transaction()
        await tx.start()
        await caching.announce(conn, note, key[1], key[2])
        await tx.rollback()
        assert await cache.lookup(key, catalog) is not None
        async with conn.transaction():
            await caching.announce(conn, catalog.resources["cq/holder"], key[1], key[2])  # not cached: silent
        assert await cache.lookup(key, catalog) is not None
        async with conn.transaction():
            await caching.announce(conn, note, key[1])  # the whole table of that tenant
        assert await cache.lookup(key, catalog) is None
    finally:
        await conn.close()
        await cache.listener.stop()


# --- two servers on one database ---------------------------------------------------------------


async def test_read_through_cache(pg_dsn: str) -> None:
    catalog = load(CACHED)
    assert catalog.resources["shop/review"].cache_ttl == 1.0
    assert catalog.resources["shop/product"].cache_ttl is None
    async with running(pg_dsn, catalog) as srv:
        await srv.register("other")
        await _until(lambda: _cache(srv).live)
        product = await _ok(srv, "POST", "shop/product", {"sku": "C1", "title": "t", "price": "1.00"})
        review = await _ok(srv, "POST", "shop/review", {"product": product["id"], "remarks": [{"text": "a"}]})
        rid = review["id"]
        assert (await _find(srv, f"shop/review/{rid}"))["remarks"] == [{"text": "a"}]

        # a write behind the server's back is not seen until the TTL runs out: the answer is cached
        await _behind_the_back(pg_dsn, "UPDATE shop__review__remarks SET text = 'b'")
        assert (await _find(srv, f"shop/review/{rid}"))["remarks"] == [{"text": "a"}]
        # another workspace never gets the entry
        assert (await _call(srv, "GET", f"shop/review/{rid}", ws="other"))[0] == 404
        await asyncio.sleep(1.1)
        assert (await _find(srv, f"shop/review/{rid}"))["remarks"] == [{"text": "b"}]

        # writes through the server invalidate at once
        await _ok(srv, "PATCH", f"shop/review/{rid}", {"remarks": [{"text": "c"}]})
        found = await _find(srv, f"shop/review/{rid}")
        assert found["remarks"] == [{"text": "c"}] and found["version"] == 2

        # so do on_delete effects on other tables (the review cascades with its product)
        assert (await _call(srv, "DELETE", f"shop/product/{product['id']}"))[0] == 204
        assert (await _call(srv, "GET", f"shop/review/{rid}"))[0] == 404


async def test_a_write_through_one_server_is_never_read_stale_through_another(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    note = await _ok(one, "POST", "cq/note", {"title": "t0", "qty": 0, "lines": [{"text": "l0"}]})
    path = f"cq/note/{note['id']}"
    await _cached(two, path)
    for i in range(1, 61):
        writer, reader = (one, two) if i % 2 else (two, one)
        await _find(reader, path)  # the reader holds the current answer ...
        written = await _ok(writer, "PATCH", path, {"title": f"t{i}", "lines": [{"text": f"l{i}"}]})
        found = await _find(reader, path)  # ... and must not serve it once the write is answered
        assert (found["version"], found["title"], found["lines"]) == (
            written["version"],
            f"t{i}",
            [{"text": f"l{i}", "amount": None, "about": None}],
        )
    assert await _cached(two, path)  # and the cache still serves hits


async def test_lifecycle_moves_and_deletes_are_seen_at_once_elsewhere(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    doc = await _ok(one, "POST", "cq/doc", {"title": "d"})
    path = f"cq/doc/{doc['id']}"
    assert (await _cached(two, path))["docstatus"] == "draft"
    await _ok(one, "POST", f"{path}/submit")
    assert (await _find(two, path))["docstatus"] == "submitted"
    await _cached(two, path)
    await _ok(one, "POST", f"{path}/cancel")
    assert (await _find(two, path))["docstatus"] == "cancelled"

    note = await _ok(one, "POST", "cq/note", {"title": "gone"})
    await _cached(two, f"cq/note/{note['id']}")
    assert (await _call(one, "DELETE", f"cq/note/{note['id']}"))[0] == 204
    assert (await _call(two, "GET", f"cq/note/{note['id']}"))[0] == 404


async def test_on_delete_effects_on_cached_referrers_are_seen_at_once_elsewhere(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    holder = await _ok(one, "POST", "cq/holder", {"name": "h"})
    note = await _ok(
        one,
        "POST",
        "cq/note",
        {"title": "n", "holder": holder["id"], "lines": [{"text": "x", "about": holder["id"]}]},
    )
    bystander = await _ok(one, "POST", "cq/note", {"title": "b"})
    pin = await _ok(one, "POST", "cq/pin", {"holder": holder["id"]})
    await _cached(two, f"cq/note/{note['id']}")
    await _cached(two, f"cq/note/{bystander['id']}")
    await _cached(two, f"cq/pin/{pin['id']}")

    assert (await _call(one, "DELETE", f"cq/holder/{holder['id']}"))[0] == 204
    found = await _find(two, f"cq/note/{note['id']}")
    assert found["holder"] is None  # set_null on the main table
    assert found["lines"] == [{"text": "x", "amount": None, "about": None}]  # and on a child row
    assert (await _call(two, "GET", f"cq/pin/{pin['id']}"))[0] == 404  # cascade


async def test_a_rolled_back_write_leaves_other_servers_caches_alone(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    note = await _ok(one, "POST", "cq/note", {"title": "kept"})
    path = f"cq/note/{note['id']}"
    cached = await _cached(two, path)
    await _behind_the_back(
        pg_dsn, "UPDATE cq__note SET title = 'unannounced' WHERE id = $1", uuid.UUID(note["id"])
    )
    # the update runs and is announced, then Postgres refuses a child row: all of it rolls back
    await _behind_the_back(pg_dsn, REFUSE_LINE)
    try:
        status, problem = await _call(one, "PATCH", path, {"title": "never", "lines": [{"text": "refused"}]})
    finally:
        await _behind_the_back(pg_dsn, "DROP TRIGGER refuse_line ON cq__note__lines")
    assert status == 422 and "does not fit its column" in problem["detail"], problem
    assert await _find(two, path) == cached  # still the cached answer: nothing was announced
    assert (await _find(one, path))["title"] == "unannounced"  # (server one had nothing cached)


async def test_concurrent_readers_never_go_back_before_an_answered_write(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    notes = [await _ok(one, "POST", "cq/note", {"title": "0", "qty": 0}) for _ in range(3)]
    acknowledged = {n["id"]: 1 for n in notes}
    stale: list[str] = []
    done = asyncio.Event()

    async def reader(srv: Running) -> None:
        rng = random.Random()
        while not done.is_set():
            rid = rng.choice(list(acknowledged))
            floor = acknowledged[rid]  # every write answered before this read began
            found = await _find(srv, f"cq/note/{rid}")
            if found["version"] < floor:
                stale.append(f"{rid}: version {found['version']} after {floor} was answered")

    async def writer() -> None:
        rng = random.Random(3)
        for i in range(80):
            rid = rng.choice(list(acknowledged))
            written = await _ok(rng.choice((one, two)), "PATCH", f"cq/note/{rid}", {"qty": i})
            acknowledged[rid] = max(acknowledged[rid], written["version"])
        done.set()

    await asyncio.gather(writer(), *(reader(srv) for srv in (one, two) for _ in range(4)))
    assert not stale, stale[:5]


async def test_a_lost_listener_turns_hits_off_until_it_is_back(
    pg_dsn: str, pair: tuple[Running, Running]
) -> None:
    one, two = pair
    cache = _cache(two)
    assert cache.listener is not None
    cache.listener.retry_first = 0.5  # keep it down long enough to look at
    note = await _ok(one, "POST", "cq/note", {"title": "a"})
    path, rid = f"cq/note/{note['id']}", uuid.UUID(note["id"])
    await _cached(two, path)

    pid = cache.listener.pid
    await _behind_the_back(pg_dsn, "SELECT pg_terminate_backend($1)", pid)
    # at once, whether or not server two has noticed: a write it cannot hear about is not hidden
    await _ok(one, "PATCH", path, {"title": "b"})
    assert (await _find(two, path))["title"] == "b"
    await _until(lambda: not cache.live, limit=1.0)
    down_epoch = cache.epoch  # a find that began reading while the listener was down ...
    # while down nothing is served from the cache, nor stored
    await _find(two, path)
    await _behind_the_back(pg_dsn, "UPDATE cq__note SET title = 'c' WHERE id = $1", rid)
    assert (await _find(two, path))["title"] == "c"
    assert len(cache) == 0

    await _until(lambda: cache.live)
    assert cache.listener.pid not in (None, pid)
    _put(cache, _key(), down_epoch)  # ... and ends after it is back may have missed writes
    assert len(cache) == 0
    await _cached(two, path)  # hits again ...
    await _ok(one, "PATCH", path, {"title": "d"})
    assert (await _find(two, path))["title"] == "d"  # ... and invalidated again


async def test_a_barrier_that_times_out_replaces_the_listener_connection(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = await _started(pg_dsn)
    listener = cache.listener
    assert listener is not None
    try:
        pid = listener.pid
        key = _key()
        _put(cache, key, cache.epoch)
        monkeypatch.setattr(caching, "BARRIER", "SELECT pg_sleep(3)")  # a listener that stopped answering
        monkeypatch.setattr(caching, "BARRIER_TIMEOUT", 0.2)
        assert await cache.lookup(key, None) is None
        assert not cache.live and len(cache) == 0
        monkeypatch.undo()
        await _until(lambda: cache.live)
        assert listener.pid not in (None, pid)  # a new connection, not the hung one
        _put(cache, key, cache.epoch)
        assert await cache.lookup(key, None) is not None
    finally:
        await listener.stop()


# --- a spawned `dap serve` ---------------------------------------------------------------------


@pytest.fixture
def spawned(pg_dsn: str, tmp_path: Path) -> Iterator[str]:
    """A ``dap serve`` child process on the module's database: its base URL."""
    spec = tmp_path / "spec"
    for name, text in CQ.items():
        (spec / name).parent.mkdir(parents=True, exist_ok=True)
        (spec / name).write_text(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update({"DAP_DSN": pg_dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": "http://ui.example"})
    dap = str(Path(sys.executable).parent / "dap")
    proc = subprocess.Popen(
        [dap, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
async def test_a_spawned_dap_serve_and_this_process_agree(pg_dsn: str, spawned: str) -> None:
    async with running(pg_dsn, load(CQ)) as here:
        await _until(lambda: _cache(here).live)

        async def there(method: str, path: str, body: Any = None) -> dict[str, Any]:
            url = f"{spawned}/default/api/{path}"
            async with here.http.request(method, url, json=body, headers=here.auth()) as resp:
                assert resp.status in (200, 201), await resp.text()
                data: dict[str, Any] = (await resp.json())["data"]
                return data

        deadline = time.monotonic() + 60
        while True:  # until the child answers (it boots meanwhile)
            try:
                note = await there("POST", "cq/note", {"title": "0"})
                break
            except OSError:
                assert time.monotonic() < deadline, "dap serve did not answer within 60 s"
                await asyncio.sleep(0.1)
        path = f"cq/note/{note['id']}"
        await there("GET", path)
        await _cached(here, path)
        for i in range(1, 31):  # written there, read here; written here, read there
            if i % 2:
                written = await there("PATCH", path, {"title": str(i)})
                assert (await _find(here, path))["version"] == written["version"]
            else:
                written = await _ok(here, "PATCH", path, {"title": str(i)})
                assert (await there("GET", path))["version"] == written["version"]
