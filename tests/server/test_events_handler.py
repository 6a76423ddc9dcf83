"""A delivery's ``handler`` (the spec's "action that also delivers") over a real server: the
action runs on the event's record once per delivery, in the delivery's savepoint, so a failing
channel rolls it back for the retry (exactly once however many tries), and a handler that cannot
run is retried and dead-lettered with the channel's effect rolled back too. And the events an
invoke reply returns (``workflows.sidecars``): an undeclared one is 422 ``SVC.EVENT.TYPE_MISSING``
with the action rolled back, a declared or built-in one is written to the outbox."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from aiohttp import web

from dap.server.catalog import Catalog
from dap.server.web import app as web_app
from dap.server.workflows import sidecars

from .conftest import Running, load, serve_options

pytestmark = pytest.mark.asyncio(loop_scope="module")

FILES = {
    "eh/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: eh}\nspec: {title: H}\n",
    "eh/ticket.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: ticket, module: eh}
spec:
  fields:
    - {name: title, type: string, required: true}
    - {name: n, type: integer}
  actions:
    - {name: mark}
    - {name: ask, impl: {type: sidecar}}
    - {name: reopen}
    - {name: stick, emits: async_stuck}
  events:
    - name: created
      deliver:
        - {channel: audit_log, handler: mark}
    - name: updated
      type: async
      deliver:
        - channel: webhook
          handler: mark
          webhook: {url_from_config: eh_hook}
          retry: {max_attempts: 5, backoff: 10ms, max_backoff: 20ms}
    - name: poked
      type: async
      deliver:
        - {channel: audit_log}
    - name: async_stuck
      deliver:
        - {channel: audit_log, handler: reopen, retry: {max_attempts: 1, backoff: 10ms}}
  state_machine:
    states: [new, marked]
    initial: new
    transitions:
      - {name: mark, from: [new, marked], to: marked, action: mark}
      - {name: reopen, from: [new], to: new, action: reopen}
      - {name: stick, from: [new, marked], to: marked, action: stick}
  expose:
    - type: rest
""",
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(FILES)


class Hook:
    """A loopback webhook receiver that fails the first ``fail`` calls."""

    def __init__(self) -> None:
        self.fail = 0
        self.calls = 0

    async def handle(self, _request: web.Request) -> web.Response:
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            return web.Response(status=500)
        return web.Response(status=204)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hook() -> AsyncIterator[tuple[Hook, str]]:
    h = Hook()
    app = web.Application()
    app.router.add_post("/{tail:.*}", h.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield h, f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    await runner.cleanup()


@pytest.fixture(scope="module")
def env(hook: tuple[Hook, str]) -> Iterator[None]:
    saved = os.environ.get("DAP_CONFIG_EH_HOOK")
    os.environ["DAP_CONFIG_EH_HOOK"] = hook[1]
    yield
    if saved is None:
        os.environ.pop("DAP_CONFIG_EH_HOOK", None)
    else:
        os.environ["DAP_CONFIG_EH_HOOK"] = saved


class App:
    """The app process's side of an invoke, on loopback terms: answers what the test sets."""

    def __init__(self) -> None:
        self.reply = sidecars.Reply()

    async def invoke(self, call: sidecars.Invocation) -> sidecars.Reply:
        return self.reply


@pytest.fixture(scope="module")
def app_process() -> App:
    return App()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, catalog: Catalog, env: None, app_process: App) -> AsyncIterator[Running]:
    server = await web_app.create_server(serve_options(pg_dsn), catalog)
    server.app[sidecars.INVOKER] = app_process  # as dap.bridge.hosting does before the start
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Running(server, http)
    finally:
        await server.stop()


async def call(srv: Running, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with srv.http.request(
        method, f"{srv.api}/default/api/eh/{path}", json=body, headers=srv.auth()
    ) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if text else None)


async def fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def delivered(dsn: str, rid: str, event: str, seconds: float = 10.0) -> asyncpg.Record:
    async with asyncio.timeout(seconds):
        while True:
            got = await fetch(
                dsn,
                "SELECT delivered_at, attempts, public_id FROM dap.outbox "
                "WHERE record_id = $1 AND event = $2",
                uuid.UUID(rid),
                event,
            )
            if got and got[0]["delivered_at"] is not None:
                return got[0]
            await asyncio.sleep(0.05)


async def test_the_handler_runs_once_with_its_delivery(srv: Running, pg_dsn: str) -> None:
    status, created = await call(srv, "POST", "ticket", {"title": "one"})
    assert status == 201, created
    rid = created["data"]["id"]
    await delivered(pg_dsn, rid, "created")
    _, found = await call(srv, "GET", f"ticket/{rid}")
    assert found["data"]["state"] == "marked" and found["data"]["version"] == 2  # mark ran once
    audit = await fetch(
        pg_dsn, "SELECT action, actor_username FROM dap.audit_log WHERE record_id = $1", uuid.UUID(rid)
    )
    assert [(a["action"], a["actor_username"]) for a in audit if a["action"] == "event:created"] == [
        ("event:created", "alice")
    ]  # and the channel delivered once, with it


async def test_a_failing_channel_rolls_the_handler_back_until_it_succeeds(
    srv: Running, pg_dsn: str, hook: tuple[Hook, str]
) -> None:
    h, _ = hook
    _, created = await call(srv, "POST", "ticket", {"title": "two"})
    rid = created["data"]["id"]
    await delivered(pg_dsn, rid, "created")
    h.fail, h.calls = 2, 0
    status, _ = await call(srv, "PATCH", f"ticket/{rid}", {"n": 1})
    assert status == 200
    row = await delivered(pg_dsn, rid, "updated")
    assert row["attempts"] == 2 and h.calls == 3  # two failed tries, then one that held
    _, found = await call(srv, "GET", f"ticket/{rid}")
    # create 1, created's handler 2, the update 3, updated's handler once: 4 (not 6)
    assert found["data"]["version"] == 4


async def test_a_handler_that_cannot_run_is_dead_lettered_with_its_channel_rolled_back(
    srv: Running, pg_dsn: str
) -> None:
    _, created = await call(srv, "POST", "ticket", {"title": "three"})
    rid = created["data"]["id"]
    await delivered(pg_dsn, rid, "created")  # its handler marked it: reopen no longer applies
    status, answer = await call(srv, "POST", f"ticket/{rid}/stick")
    assert status == 200, answer
    row = await delivered(pg_dsn, rid, "async_stuck")
    dead = await fetch(
        pg_dsn,
        "SELECT consumer, attempts, last_error FROM dap.dead_letter WHERE event_id = $1",
        row["public_id"],
    )
    assert [(d["consumer"], d["attempts"]) for d in dead] == [("eh/ticket:async_stuck:0:audit_log", 2)]
    assert "reopen" in dead[0]["last_error"] or "marked" in dead[0]["last_error"], dead[0]["last_error"]
    audit = await fetch(
        pg_dsn,
        "SELECT 1 FROM dap.audit_log WHERE record_id = $1 AND action = 'event:async_stuck'",
        uuid.UUID(rid),
    )
    assert audit == []  # the audit row went with the handler's failure, try after try


async def test_an_invoke_reply_with_an_undeclared_event_is_type_missing(
    srv: Running, pg_dsn: str, app_process: App
) -> None:
    _, created = await call(srv, "POST", "ticket", {"title": "four"})
    rid = created["data"]["id"]
    await delivered(pg_dsn, rid, "created")
    app_process.reply = sidecars.Reply(data={"ok": True}, events=(sidecars.Event("nonesuch", {"a": 1}),))
    status, problem = await call(srv, "POST", f"ticket/{rid}/ask")
    assert status == 422 and problem["code"] == "SVC.EVENT.TYPE_MISSING", problem
    assert "nonesuch" in problem["detail"]
    written = await fetch(
        pg_dsn, "SELECT event FROM dap.outbox WHERE record_id = $1 ORDER BY id", uuid.UUID(rid)
    )
    assert [w["event"] for w in written] == ["created"]  # the action rolled back, nothing written
    app_process.reply = sidecars.Reply(
        data={"ok": True}, events=(sidecars.Event("poked", {"a": 2}), sidecars.Event("updated", {}))
    )
    status, answer = await call(srv, "POST", f"ticket/{rid}/ask")
    assert status == 200, answer
    written = await fetch(
        pg_dsn, "SELECT event FROM dap.outbox WHERE record_id = $1 ORDER BY id", uuid.UUID(rid)
    )
    assert [w["event"] for w in written] == ["created", "poked", "updated"]  # declared, built-in
