"""Events over real HTTP and Postgres: built-in events in the write's transaction, the dispatcher's
channels (audit_log, webhook signed and verified with ``standardwebhooks``, notification,
reliable_event, pubsub), retries with a stable ``webhook-id``, dead letter and replay, metrics,
and per-record order under injected webhook failures."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
import standardwebhooks
from aiohttp import web

from dap.server.catalog import Catalog

from .conftest import ADMIN, Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "whsec_" + "c2VjcmV0LW9mLXRoZS13ZWJob29rLXRlc3Rz"  # base64 of a test secret
EV = {
    "ev/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: ev}
spec: {title: Events}
""",
    "ev/note.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: ev}
spec:
  lifecycle: true
  fields:
    - {name: title, type: string, required: true}
    - {name: n, type: integer}
    - {name: reader, type: string}
  actions:
    - {name: touch, emits: touched}
    - {name: mark}
    - {name: later, call: async, emits: touched}
  events:
    - name: created
      deliver:
        - {channel: audit_log}
        - channel: webhook
          webhook: {url_from_config: hook_url, sign: true}
          retry: {max_attempts: 3, backoff: 50ms, max_backoff: 200ms}
        - channel: notification
          notification: {template: "New note {{ title }} by {{ actor }}", to: ["field:reader", "user:boss"]}
        - {channel: pubsub}
        - {channel: reliable_event, target: {resource: ev.note, action: mark}}
    - name: updated
      deliver:
        - channel: webhook
          webhook: {url_from_config: order_url, sign: true}
          retry: {max_attempts: 50, backoff: 10ms, max_backoff: 20ms}
    - name: submitted
      deliver:
        - channel: webhook
          webhook: {url_from_config: hook_url}
          idempotency_key: "submitted-{{ title }}"
    - name: touched
      publish: {topic: ev_touched}
      deliver:
        - channel: webhook
          webhook: {url_from_config: dead_url}
          retry: {max_attempts: 1, backoff: 10ms}
          dead_letter: {action: mark}
        - {channel: queue, job: mark}
  state_machine:
    states: [new, marked]
    initial: new
    transitions:
      - {name: mark, from: [new, marked], to: marked, action: mark}
      - {name: touch, from: [new, marked], to: marked, action: touch}
      - {name: later, from: [new, marked], to: marked, action: later}
  expose:
    - type: rest
""",
}


class Receiver:
    """A loopback webhook receiver that verifies every signature with the reference library."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.fail: dict[str, int] = {}  # record title → failures still to answer with 500
        self.always_fail: set[str] = set()
        self.counter = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        path = request.path
        signed = "webhook-signature" in request.headers
        data = (
            standardwebhooks.Webhook(SECRET).verify(body, dict(request.headers))
            if signed
            else json.loads(body)
        )
        self.seen.append(
            {
                "path": path,
                "id": request.headers["webhook-id"],
                "key": request.headers.get("Idempotency-Key"),
                "signed": signed,
                "data": data,
            }
        )
        self.counter += 1
        title = data["payload"].get("record", {}).get("title", "")
        if path in self.always_fail or self.fail.get(title, 0) > 0:
            self.fail[title] = self.fail.get(title, 0) - 1
            return web.Response(status=500)
        if path == "/order" and self.counter % 3 == 0:  # injected failures
            return web.Response(status=503)
        return web.Response(status=204)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(EV)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield rec, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture(scope="module")
def env(receiver: tuple[Receiver, str]) -> Iterator[None]:
    base = receiver[1]
    values = {
        "DAP_WEBHOOK_SECRET": SECRET,
        "DAP_CONFIG_HOOK_URL": f"{base}/hook",
        "DAP_CONFIG_ORDER_URL": f"{base}/order",
        "DAP_CONFIG_DEAD_URL": f"{base}/dead",
    }
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog, env: None) -> AsyncIterator[Running]:
    async with running(pg_dsn, catalog) as r:
        yield r


async def call(srv: Running, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    async with srv.http.request(
        method, f"{srv.api}/default/api/ev/{path}", json=body, headers=srv.auth(**kw)
    ) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if text else None)


async def until(check: Any, seconds: float = 10.0) -> Any:
    """Poll ``check`` (async, returns a truthy value when done) until it holds or time runs out."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        found = await check()
        if found or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.05)


async def rows(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def test_the_standard_actions_emit_their_built_in_events_in_the_same_transaction(
    srv: Running, pg_dsn: str
) -> None:
    status, created = await call(srv, "POST", "note", {"title": "a", "reader": "carol"})
    assert status == 201, created
    rid = created["data"]["id"]
    assert (await call(srv, "PATCH", f"note/{rid}", {"n": 2}))[0] == 200
    assert (await call(srv, "POST", f"note/{rid}/submit"))[0] == 200
    assert (await call(srv, "POST", f"note/{rid}/cancel"))[0] == 200
    status, other = await call(srv, "POST", "note", {"title": "b"})
    assert (await call(srv, "DELETE", f"note/{other['data']['id']}"))[0] == 204
    # a refused write leaves no event: the event is part of the write's transaction
    assert (await call(srv, "POST", "note", {"n": 1}))[0] == 422
    found = await rows(
        pg_dsn,
        "SELECT event, action, version, payload FROM dap.outbox "
        "WHERE record_id = ANY($1::uuid[]) ORDER BY id",
        [uuid.UUID(rid), uuid.UUID(other["data"]["id"])],
    )
    mine = [(r["event"], r["action"]) for r in found]
    assert mine == [
        ("created", "create"),
        ("updated", "update"),
        ("submitted", "submit"),
        ("cancelled", "cancel"),
        ("created", "create"),
        ("deleted", "delete"),
    ]
    versions = [r["version"] for r in found[:4]]  # the reliable_event's transition moves it too
    assert versions[0] == 1 and versions == sorted(set(versions))
    updated = json.loads(next(r for r in found if r["event"] == "updated")["payload"])
    assert updated["changed"] == ["n"]
    assert updated["record"]["n"] == 2
    total = await rows(pg_dsn, "SELECT count(*) AS c FROM dap.outbox WHERE payload->'record'->>'n' = '1'")
    assert total[0]["c"] == 0


async def test_created_is_delivered_on_every_channel(
    srv: Running, pg_dsn: str, receiver: tuple[Receiver, str]
) -> None:
    rec, _ = receiver
    rec.fail["deliver me"] = 2  # two failures, then success: three tries, one webhook-id
    async with srv.http.post(
        f"{srv.api}/default/api/ev/note", json={"title": "deliver me", "reader": "carol"}, headers=srv.auth()
    ) as resp:
        assert resp.status == 201
        # ``created`` is declared without a type: sync by its name, so delivered before the answer
        assert resp.headers["Event-Delivery"] == "settled"
        created = await resp.json()
    rid = created["data"]["id"]
    got = await rows(pg_dsn, "SELECT delivered_at FROM dap.outbox WHERE record_id = $1", uuid.UUID(rid))
    assert got[0]["delivered_at"] is not None

    async def delivered() -> Any:
        got = await rows(
            pg_dsn,
            "SELECT delivered_at, attempts, public_id FROM dap.outbox "
            "WHERE record_id = $1 AND event = 'created'",
            uuid.UUID(rid),
        )
        return got[0] if got[0]["delivered_at"] is not None else None

    row = await until(delivered)
    assert row is not None and row["attempts"] == 2
    hooks = [s for s in rec.seen if s["path"] == "/hook" and s["data"]["record_id"] == rid]
    assert len(hooks) == 3 and {h["id"] for h in hooks} == {str(row["public_id"])}
    assert all(h["signed"] for h in hooks)  # verified by standardwebhooks in the receiver
    assert hooks[0]["data"]["payload"]["record"]["title"] == "deliver me"
    audit = await rows(pg_dsn, "SELECT action FROM dap.audit_log WHERE record_id = $1", uuid.UUID(rid))
    assert [a["action"] for a in audit] == ["event:created"]
    # reliable_event ran the transition once, as dap-events
    _status, found = await call(srv, "GET", f"note/{rid}")
    assert found["data"]["state"] == "marked" and found["data"]["version"] == 2
    settled = await rows(
        pg_dsn, "SELECT consumer, outcome FROM dap.event_deliveries WHERE event_id = $1", row["public_id"]
    )
    assert len(settled) == 5 and {s["outcome"] for s in settled} == {"delivered"}
    # in-app notifications for the field's user and the named one, readable over REST
    for user in ("carol", "boss"):
        async with srv.http.get(
            f"{srv.api}/default/api/_notifications", headers=srv.auth(username=user, sub=user)
        ) as resp:
            assert resp.status == 200
            data = (await resp.json())["data"]
        mine = [n for n in data if n["record_id"] == rid]
        assert [n["body"] for n in mine] == ["New note deliver me by alice"]
    async with srv.http.post(
        f"{srv.api}/default/api/_notifications/read",
        json={"ids": [mine[0]["id"]]},
        headers=srv.auth(username="boss", sub="boss"),
    ) as resp:
        assert (await resp.json()) == {"read": 1}


async def test_a_sync_event_of_an_async_action_is_a_type_mismatch(srv: Running) -> None:
    _, created = await call(srv, "POST", "note", {"title": "mismatch"})
    status, problem = await call(srv, "POST", f"note/{created['data']['id']}/later")
    assert status == 422 and problem["code"] == "SVC.EVENT.TYPE_MISMATCH"
    _, found = await call(srv, "GET", f"note/{created['data']['id']}")
    assert found["data"]["version"] == 2  # create, then the reliable_event's mark; later did not run


async def test_an_idempotency_key_settles_one_delivery_for_events_rendering_it_alike(
    srv: Running, pg_dsn: str, receiver: tuple[Receiver, str]
) -> None:
    rec, _ = receiver
    ids = [(await call(srv, "POST", "note", {"title": "twin"}))[1]["data"]["id"] for _ in range(2)]
    for rid in ids:
        async with srv.http.post(f"{srv.api}/default/api/ev/note/{rid}/submit", headers=srv.auth()) as resp:
            assert resp.status == 200
            assert resp.headers["Event-Delivery"] == "settled"
    sent = [s for s in rec.seen if s["key"] == "submitted-twin"]
    assert len(sent) == 1 and sent[0]["data"]["record_id"] == ids[0]
    got = await rows(
        pg_dsn,
        "SELECT delivered_at FROM dap.outbox WHERE event = 'submitted' AND record_id = ANY($1::uuid[])",
        [uuid.UUID(r) for r in ids],
    )
    assert len(got) == 2 and all(r["delivered_at"] is not None for r in got)


async def test_pubsub_notifies_listeners_after_commit(srv: Running, pg_dsn: str) -> None:
    got: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.add_listener("dap_events", lambda *a: got.put_nowait(a[3]))
        _status, created = await call(srv, "POST", "note", {"title": "pub"})
        rid = created["data"]["id"]
        while True:
            note = json.loads(await asyncio.wait_for(got.get(), 10))
            if note["record_id"] == rid:
                break
        assert note["event"] == "created" and note["entity"] == "ev/note"
    finally:
        await conn.close()


async def test_a_delivery_past_its_retries_is_dead_lettered_and_replayed_from_the_admin_listener(
    srv: Running, pg_dsn: str, receiver: tuple[Receiver, str]
) -> None:
    rec, _ = receiver
    rec.always_fail.add("/dead")
    status, created = await call(srv, "POST", "note", {"title": "doomed"})
    rid = created["data"]["id"]
    status, answer = await call(srv, "POST", f"note/{rid}/touch")
    assert status == 200, answer

    async def dead() -> Any:
        return await rows(
            pg_dsn, "SELECT * FROM dap.dead_letter WHERE event_id = $1", uuid.UUID(answer["event"])
        )

    letters = await until(dead)
    assert len(letters) == 1 and letters[0]["attempts"] == 2 and "500" in letters[0]["last_error"]
    _, after = await call(srv, "GET", f"note/{rid}")
    # create (1), its reliable mark (2), touch (3), then the dead_letter target ``mark`` (4)
    assert after["data"]["version"] == 4
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with srv.http.get(f"{srv.admin}/dead-letters", headers=admin) as resp:
        listed = (await resp.json())["data"]
    entry = next(d for d in listed if d["event_id"] == answer["event"])
    rec.always_fail.discard("/dead")
    async with srv.http.post(f"{srv.admin}/dead-letters/{entry['id']}/replay", headers=admin) as resp:
        assert resp.status == 202, await resp.text()
    async with srv.http.post(f"{srv.admin}/dead-letters/{entry['id']}/replay", headers=admin) as resp:
        assert resp.status == 409

    async def replayed() -> Any:
        got = await rows(
            pg_dsn, "SELECT outcome FROM dap.event_deliveries WHERE event_id = $1", uuid.UUID(answer["event"])
        )
        return got if got and got[0]["outcome"] == "delivered" else None

    assert await until(replayed)
    ids = {s["id"] for s in rec.seen if s["path"] == "/dead"}
    assert ids == {answer["event"]}  # the replay keeps the webhook-id
    async with srv.http.get(f"{srv.admin}/metrics") as resp:
        text = await resp.text()
    assert 'dap_events_dead_total{channel="webhook"}' in text


async def test_order_per_record_holds_under_injected_failures(
    srv: Running, pg_dsn: str, receiver: tuple[Receiver, str]
) -> None:
    rec, _ = receiver
    ids = []
    for i in range(4):
        _status, created = await call(srv, "POST", "note", {"title": f"o{i}"})
        ids.append(created["data"]["id"])

    async def bump(rid: str) -> None:
        for n in range(15):
            status, _ = await call(srv, "PATCH", f"note/{rid}", {"n": n})
            assert status == 200

    await asyncio.gather(*(bump(r) for r in ids))

    async def drained() -> bool:
        got = await rows(
            pg_dsn,
            "SELECT count(*) AS c FROM dap.outbox WHERE delivered_at IS NULL AND record_id = ANY($1::uuid[])",
            [uuid.UUID(r) for r in ids],
        )
        return got[0]["c"] == 0

    assert await until(drained, 60)
    for rid in ids:
        tries = [
            (s["data"]["version"], s["data"]["payload"]["record"]["n"])
            for s in rec.seen
            if s["path"] == "/order" and s["data"]["record_id"] == rid
        ]
        order: list[tuple[int, int]] = []
        for t in tries:  # a failed try is repeated before anything later of the record is sent
            if not order or order[-1] != t:
                order.append(t)
        assert [n for _, n in order] == list(range(15))
        assert [v for v, _ in order] == sorted({v for v, _ in order})
    assert sum(1 for s in rec.seen if s["path"] == "/order") > 60  # failures were injected and retried


async def test_metrics_add_up_once_drained(srv: Running, pg_dsn: str) -> None:
    async def drained() -> bool:  # a note deleted at once makes its reliable_event die (3 retries)
        got = await rows(pg_dsn, "SELECT count(*) AS c FROM dap.outbox WHERE delivered_at IS NULL")
        return got[0]["c"] == 0

    assert await until(drained, 30)
    async with srv.http.get(f"{srv.admin}/metrics") as resp:
        text = await resp.text()
    values: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("dap_events_") and "_total{" in line:
            name, rest = line.split("{", 1)
            channel = rest.split('"')[1]
            values[(name, channel)] = float(rest.rsplit(" ", 1)[1])
    for channel in ("webhook", "audit_log", "notification", "reliable_event", "pubsub"):
        emitted = values.get(("dap_events_emitted_total", channel), 0)
        done = values.get(("dap_events_delivered_total", channel), 0) + values.get(
            ("dap_events_dead_total", channel), 0
        )
        assert emitted > 0 and done == emitted, (channel, values)
