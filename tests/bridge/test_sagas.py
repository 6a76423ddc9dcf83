"""Sagas against a real app process: the fault-injection table, and a person's decisions.

Each case starts one saga whose params carry its faults (``saga_target``), so the table runs side
by side. After each: the saga ends in one of completed / compensated / outcome_unknown /
compensation_failed, its job says so (``SVC.SAGA.*`` codes), and the app's effects match exactly:
the steps applied are those the state says, each key applied at most once, nothing left applied
after a compensation.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server import state as app_state
from dap.server.events import outbox
from dap.server.storage import db
from dap.server.workflows import jobs, saga_store, sagas
from tests.bridge import saga_spec
from tests.bridge.conftest import HERE, JSON, AppProcess, Bridged, bridged
from tests.bridge.test_invoke import item, stock

pytestmark = pytest.mark.asyncio(loop_scope="module")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SagaApp(AppProcess):
    """The test app on its unix socket and on ``port`` (the HTTP steps)."""

    def __init__(self, directory: Path, port: int) -> None:
        super().__init__(directory)
        self.port = port

    def start(self) -> None:
        self.command = [sys.executable, str(HERE / "app.py")]
        self.socket.unlink(missing_ok=True)
        import subprocess

        self.proc = subprocess.Popen([*self.command, self.endpoint, str(self.port)])
        for _ in range(200):
            if self.socket.exists():
                return
            time.sleep(0.05)
        raise RuntimeError("the saga test app did not open its socket in 10 s")


@pytest.fixture(scope="module")
def saga_app() -> Iterator[SagaApp]:
    with tempfile.TemporaryDirectory(prefix="dap-saga-app-") as tmp:
        process = SagaApp(Path(tmp), free_port())
        process.start()
        try:
            yield process
        finally:
            process.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(
    pg_dsn: str, saga_app: SagaApp, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Bridged]:
    spec = saga_spec.write(tmp_path_factory.mktemp("saga-spec"), saga_app.port)
    async with bridged(pg_dsn, saga_app, spec=spec, invoke_timeout="2s", pool_size=8) as b:
        yield b


async def start(srv: Bridged, action: str, faults: dict[str, str], **more: Any) -> str:
    status, answer = await srv.call("POST", f"trip/{action}", {"faults": faults, **more})
    assert status == 202, answer
    return str(answer["data"]["id"])


async def saga(srv: Bridged, saga_id: str, **auth: Any) -> tuple[int, Any]:
    headers = {**srv.auth(**auth), **JSON}
    async with srv.http.get(f"{srv.api}/default/api/_sagas/{saga_id}", headers=headers) as resp:
        return resp.status, await resp.json()


async def settled(srv: Bridged, saga_id: str, seconds: float = 60.0) -> dict[str, Any]:
    """The saga once it ended or parked, and its job too."""
    deadline = time.monotonic() + seconds
    while True:
        status, answer = await saga(srv, saga_id)
        assert status in (200, 404), answer  # 404: its job is not handed to the engine yet
        if status == 200 and answer["data"]["state"] not in ("running", "compensating"):
            job_status, job = await srv.call("GET", f"trip/_jobs/{saga_id}")
            assert job_status == 200, job
            if job["data"]["state"] in ("succeeded", "failed"):
                return {**answer["data"], "job": job["data"]}
        assert time.monotonic() < deadline, f"saga never settled: {answer}"
        await asyncio.sleep(0.1)


async def effects(srv: Bridged, saga_id: str) -> dict[str, Any]:
    port = srv.app_process.port  # type: ignore[attr-defined]
    async with srv.http.get(f"http://127.0.0.1:{port}/saga/effects", params={"saga": saga_id}) as resp:
        found: dict[str, Any] = await resp.json()
        return found


ALL = ["charge", "hold", "notify"]
TABLE: list[tuple[str, str, dict[str, str], str, list[str], list[str]]] = [
    # (case, action, faults, final state, steps left applied, steps undone)
    ("no fault", "book", {}, "completed", ALL, []),
    ("hold refused", "book", {"hold": "fail"}, "compensated", [], []),
    ("charge refused", "book", {"charge": "fail"}, "compensated", [], ["hold"]),
    ("notify refused", "book", {"notify": "fail"}, "compensated", [], ["charge", "hold"]),
    ("hold timeout, applied", "book", {"hold": "timeout_applied"}, "completed", ALL, []),
    ("charge timeout, applied", "book", {"charge": "timeout_applied"}, "completed", ALL, []),
    ("notify timeout, applied", "book", {"notify": "timeout_applied"}, "completed", ALL, []),
    ("hold timeout, not applied", "book", {"hold": "timeout_not_applied"}, "outcome_unknown", [], []),
    (
        "charge timeout, not applied",
        "book",
        {"charge": "timeout_not_applied"},
        "outcome_unknown",
        ["hold"],
        [],
    ),
    (
        "notify timeout, not applied",
        "book",
        {"notify": "timeout_not_applied"},
        "outcome_unknown",
        ["charge", "hold"],
        [],
    ),
    ("charge timeout once, then applied", "book", {"charge": "timeout_not_applied:1"}, "completed", ALL, []),
    ("charge applied, connection lost", "book", {"charge": "drop_applied"}, "completed", ALL, []),
    ("notify applied, connection lost", "book", {"notify": "drop_applied"}, "completed", ALL, []),
    ("checked hold, not applied", "checked", {"hold": "timeout_not_applied"}, "compensated", [], []),
    (
        "checked charge, not applied",
        "checked",
        {"charge": "timeout_not_applied"},
        "compensated",
        [],
        ["hold"],
    ),
    ("checked notify, applied", "checked", {"notify": "timeout_applied"}, "completed", ALL, []),
    ("checked charge, applied", "checked", {"charge": "timeout_applied"}, "completed", ALL, []),
    (
        "charge's compensation fails",
        "book",
        {"notify": "fail", "charge.undo": "fail"},
        "compensation_failed",
        ["charge", "hold"],
        [],
    ),
    (
        "hold's compensation fails",
        "book",
        {"notify": "fail", "hold.undo": "fail"},
        "compensation_failed",
        ["hold"],
        ["charge"],
    ),
    (
        "charge's compensation times out",
        "book",
        {"notify": "fail", "charge.undo": "timeout_not_applied"},
        "compensation_failed",
        ["charge", "hold"],
        [],
    ),
    (
        "charge's compensation fails once",
        "book",
        {"notify": "fail", "charge.undo": "fail:1"},
        "compensated",
        [],
        ["charge", "hold"],
    ),
]
CODES = {
    "completed": None,
    "compensated": "SVC.SAGA.STEP_FAILED",
    "outcome_unknown": "SVC.SAGA.OUTCOME_UNKNOWN",
    "compensation_failed": "SVC.SAGA.COMPENSATION_FAILED",
}


async def test_the_fault_table(srv: Bridged) -> None:
    ids = [await start(srv, action, faults) for _, action, faults, *_ in TABLE]
    ends = await asyncio.gather(*(settled(srv, i) for i in ids))
    wrong = []
    for (case, _, _, state, applied, undone), saga_id, end in zip(TABLE, ids, ends, strict=True):
        seen = await effects(srv, saga_id)
        job = end["job"]
        code = job.get("error", {}).get("code") if job["state"] == "failed" else None
        got = (end["state"], seen["applied"], seen["undone"], job["state"] == "succeeded")
        want = (state, applied, undone, state == "completed")
        if got != want or seen["max_per_key"] > 1:
            wrong.append((case, got, want, seen["max_per_key"]))
        if state in ("outcome_unknown", "compensation_failed") and code != CODES[state]:
            wrong.append((case, "code", code, CODES[state]))
        if state == "completed":
            assert job["progress"] == 100 and set(job["result"]["result"]) == set(ALL), job
    assert not wrong, wrong


async def test_a_parked_saga_is_in_the_inbox_the_event_stream_and_its_timeline(
    srv: Bridged, pg_dsn: str
) -> None:
    saga_id = await start(srv, "book", {"charge": "timeout_not_applied"})
    end = await settled(srv, saga_id)
    assert end["state"] == "outcome_unknown" and end["code"] == "SVC.SAGA.OUTCOME_UNKNOWN"
    assert "charge" in end["job"]["error"]["detail"] and "retry" in end["job"]["error"]["detail"]
    outcomes = [(t["name"], t["phase"], t["outcome"]) for t in end["timeline"]]
    assert ("hold", "do", "done") in outcomes
    assert outcomes.count(("charge", "do", "sent")) == 2  # its one retry, same key
    assert outcomes[-1] == ("charge", "saga", "outcome_unknown")
    async with srv.http.get(f"{srv.api}/default/api/_sagas", headers=srv.auth()) as resp:
        status, inbox = resp.status, await resp.json()
    assert status == 200 and saga_id in [s["id"] for s in inbox["data"]]
    conn = await asyncpg.connect(pg_dsn)
    try:
        events = await conn.fetch("SELECT event FROM dap.outbox WHERE record_id = $1", uuid.UUID(saga_id))
    finally:
        await conn.close()
    assert [e["event"] for e in events] == ["saga.outcome_unknown"]


async def test_a_step_s_done_and_the_next_step_s_sent_commit_together(srv: Bridged) -> None:
    """One commit per step boundary: the ``done`` of hold and the ``sent`` of charge (then of
    charge and notify, then notify's and the saga's end) share a transaction, so their timeline
    entries share its clock."""
    end = await settled(srv, await start(srv, "book", {}))
    assert end["state"] == "completed", end
    at = {(t["name"], t["phase"], t["outcome"]): t["at"] for t in end["timeline"]}
    assert at[("hold", "do", "done")] == at[("charge", "do", "sent")]
    assert at[("charge", "do", "done")] == at[("notify", "do", "sent")]
    assert at[("notify", "do", "done")] == at[(None, "saga", "completed")]  # the last ends the saga
    assert at[("hold", "do", "sent")] != at[("hold", "do", "done")]  # the first is sent on its own


@pytest.mark.parametrize(
    ("fail", "state", "added"),
    [
        pytest.param(None, "completed", 3, id="its writes commit with its done"),
        pytest.param("error", "compensated", 0, id="its writes roll back when it fails"),
    ],
)
async def test_an_app_process_step_s_ctx_writes_join_its_transaction_begun_at_their_first_use(
    srv: Bridged, fail: str | None, state: str, added: int
) -> None:
    """An app-process step's transaction begins only when the app's first ``/ctx`` statement
    joins it (a step that writes nothing commits its ``done`` alone): ``tally`` increments the
    item's stock through ``/ctx``, then fails or not; its write commits with the step or not at
    all, exactly once."""
    it = await item(srv, stock=4)
    body = {"item": it["id"], "amount": 3, "faults": {}, **({"fail": fail} if fail else {})}
    status, answer = await srv.call("POST", "trip/tallied", body)
    assert status == 202, answer
    end = await settled(srv, str(answer["data"]["id"]))
    assert end["state"] == state, end
    assert await stock(srv, it) == 4 + added


async def test_a_saga_s_request_creates_it_and_sends_its_first_step_in_one_commit(
    srv: Bridged, pg_dsn: str
) -> None:
    """The request's statement queues the job already handed to the engine (no job-worker
    claim), creates the saga and records hold's first attempt as sent: one commit, one clock;
    the 202 shows the job as committed (running, its first run)."""
    status, answer = await srv.call("POST", "trip/book", {"faults": {}})
    assert status == 202, answer
    assert (answer["data"]["state"], answer["data"]["runs"]) == ("running", 1)
    saga_id = str(answer["data"]["id"])
    end = await settled(srv, saga_id)
    assert end["state"] == "completed", end
    seen = [(t["name"], t["phase"], t["outcome"]) for t in end["timeline"]]
    assert seen[:2] == [(None, "saga", "accepted"), ("hold", "do", "sent")]
    assert end["timeline"][0]["at"] == end["timeline"][1]["at"]
    conn = await asyncpg.connect(pg_dsn)
    try:
        job = await conn.fetchrow(
            "SELECT created_at, started_at, runs FROM dap.jobs WHERE id = $1", uuid.UUID(saga_id)
        )
    finally:
        await conn.close()
    assert job["created_at"] == job["started_at"] and job["runs"] == 1
    assert job["created_at"].isoformat() == end["timeline"][0]["at"]
    assert (await effects(srv, saga_id))["max_per_key"] == 1


async def test_a_saga_accepted_by_a_process_that_died_before_its_first_call_left_is_resumed(
    srv: Bridged, pg_dsn: str
) -> None:
    """The state a request's commit leaves (saga created, held, hold recorded as sent) with no
    process to drive it: once the lease runs out a claim finds hold in flight, an unknown outcome,
    and sends it again with the same key; it completes with every step applied once."""
    template = uuid.UUID(await start(srv, "book", {}))
    await settled(srv, str(template))
    pool = await db.open_pool(pg_dsn, 1)  # the platform's JSON codecs, as the server's
    try:
        async with db.connection(pool) as conn:
            new = await booking_like(conn, template)
            # what a request's commit leaves, its process then gone
            await saga_store.accept(conn, new, "gone:1:dead:claim", 0.2, "hold")
    finally:
        await pool.close()
    end = await settled(srv, str(new.id))
    assert end["state"] == "completed", end
    seen = [(t["name"], t["phase"], t["outcome"], t["attempt"]) for t in end["timeline"]]
    assert seen[:3] == [
        (None, "saga", "accepted", None),
        ("hold", "do", "sent", 1),
        ("hold", "do", "sent", 2),
    ]
    assert await effects(srv, str(new.id)) == {"applied": ALL, "undone": [], "max_per_key": 1}


async def test_a_saga_accepted_where_no_loop_can_take_it_is_left_unheld_to_the_next_claim(
    srv: Bridged, pg_dsn: str
) -> None:
    """An engine with no loop running (or with ``WAITING`` sagas per slot already waiting) creates
    the saga unheld: any process's claim takes it at once, no lease has to run out."""
    template = uuid.UUID(await start(srv, "book", {}))
    await settled(srv, str(template))
    idle = sagas.Engine(
        pg_dsn, lambda: srv.server.app[app_state.SPEC].current, lease=600.0, slots=1
    )  # never started
    pool = await db.open_pool(pg_dsn, 1)
    try:
        async with db.connection(pool) as conn, conn.transaction():
            new = await booking_like(conn, template)
            _job, accepted = await idle.accept(conn, new, steps_of(srv, "book"))
            held = await conn.fetchrow("SELECT worker, lease_until FROM dap.sagas WHERE id = $1", new.id)
        assert accepted.holder is None and tuple(held) == (None, None)
        idle.take(accepted)  # nothing to run here: it only wakes
        end = await settled(srv, str(new.id), seconds=20)  # the running engine claimed it
    finally:
        await pool.close()
    assert end["state"] == "completed", end
    assert await effects(srv, str(new.id)) == {"applied": ALL, "undone": [], "max_per_key": 1}


async def test_an_idle_engine_holds_the_connections_of_one_loop(srv: Bridged, pg_dsn: str) -> None:
    """At start only loop 0 looks at the table (the others wait to be woken): an idle process
    holds its pool's least, where 48 loops claiming at once opened 16 connections at every boot,
    held for asyncpg's five idle minutes."""
    engine = sagas.Engine(pg_dsn, lambda: srv.server.app[app_state.SPEC].current, lease=600.0)
    await engine.start()
    try:
        await asyncio.sleep(0.5)  # loop 0's first claim is done, the others would have claimed by now
        assert engine.pool.get_size() <= 2, engine.pool.get_size()
    finally:
        await engine.stop()


async def booking_like(conn: db.Connection, template: uuid.UUID) -> jobs.New:
    """A new ``book`` job of the tenant and principal of the job ``template`` (an empty fault
    table): what a request would insert, for tests that accept a saga by hand."""
    model = await conn.fetchrow("SELECT tenant_id, principal FROM dap.jobs WHERE id = $1", template)
    assert model is not None
    return jobs.New(
        id=uuid.uuid4(),
        tenant=model["tenant_id"],
        target="store/trip",
        kind="service",
        action="book",
        record_id=None,
        principal=model["principal"],
        body='{"faults": {}}',
        expected=None,
        request_id=None,
    )


def steps_of(srv: Bridged, action: str) -> tuple[Any, ...]:
    service = srv.server.app[app_state.SPEC].current.any_service("store/trip")
    assert service is not None
    found = sagas.steps_of(service.actions.get(action))
    assert found is not None
    return found


async def decide(srv: Bridged, saga_id: str, op: str, body: Any = None, **auth: Any) -> tuple[int, Any]:
    headers = {**srv.auth(**auth), **JSON}
    url = f"{srv.api}/default/api/_sagas/{saga_id}/{op}"
    async with srv.http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_a_person_resolves_skips_and_retries_parked_sagas(srv: Bridged, pg_dsn: str) -> None:
    unknown_notify = await start(srv, "book", {"notify": "timeout_not_applied"})
    unknown_charge = await start(srv, "book", {"charge": "timeout_not_applied"})
    stuck_undo = await start(srv, "book", {"notify": "fail", "charge.undo": "fail"})
    flaky_undo = await start(srv, "book", {"notify": "fail", "charge.undo": "fail:2"})
    for saga_id in (unknown_notify, unknown_charge, stuck_undo, flaky_undo):
        assert (await settled(srv, saga_id))["state"] in ("outcome_unknown", "compensation_failed")

    # who may: the saga's resolve permission (store.trip.resolve); a clerk may not
    status, answer = await decide(srv, unknown_notify, "retry", roles=["clerk"])
    assert status == 403 and answer["code"] == "SVC.AUTH.FORBIDDEN", answer
    status, answer = await decide(srv, unknown_notify, "skip", {})
    assert status == 422 and answer["code"] == "SVC.SAGA.REASON_REQUIRED", answer

    # someone checked the supplier: the notification went out; the saga goes on and completes
    status, answer = await decide(
        srv, unknown_notify, "resolve", {"applied": True, "reason": "mailbox shows it"}
    )
    assert status == 200, answer
    end = await settled(srv, unknown_notify)
    assert end["state"] == "completed" and end["job"]["state"] == "succeeded"
    assert ("notify", "person", "resolve", "alice") in [
        (t["name"], t["phase"], t["outcome"], t["actor"]) for t in end["timeline"]
    ]

    # skip the unknown charge as not applied: hold is compensated
    status, _ = await decide(srv, unknown_charge, "skip", {"reason": "the bank has no such charge"})
    assert status == 200
    end = await settled(srv, unknown_charge)
    assert end["state"] == "compensated" and (await effects(srv, unknown_charge))["applied"] == []

    # a compensation still failing after a retry stays parked; skipped (undone by hand) it goes on
    status, _ = await decide(srv, stuck_undo, "retry")
    assert status == 200
    assert (await settled(srv, stuck_undo))["state"] == "compensation_failed"
    status, _ = await decide(srv, stuck_undo, "skip", {"reason": "refunded by hand"})
    assert status == 200
    end = await settled(srv, stuck_undo)
    assert end["state"] == "compensated"
    assert (await effects(srv, stuck_undo)) == {"applied": ["charge"], "undone": ["hold"], "max_per_key": 1}

    # the flaky compensation succeeds on a person's retry (fresh attempts, the same key)
    status, _ = await decide(srv, flaky_undo, "retry")
    assert status == 200
    end = await settled(srv, flaky_undo)
    assert end["state"] == "compensated" and (await effects(srv, flaky_undo))["applied"] == []

    # a finished saga is not parked: 409
    status, answer = await decide(srv, flaky_undo, "retry")
    assert status == 409 and answer["code"] == "SVC.SAGA.NOT_PARKED"

    conn = await asyncpg.connect(pg_dsn)
    try:
        audited = await conn.fetch(
            "SELECT action, actor_username FROM dap.audit_log WHERE record_id = $1 ORDER BY at",
            uuid.UUID(stuck_undo),
        )
    finally:
        await conn.close()
    assert [(a["action"], a["actor_username"]) for a in audited] == [
        ("saga.retry", "alice"),
        ("saga.skip", "alice"),
    ]


async def test_a_saga_is_read_by_its_requester_and_its_resolvers_only(srv: Bridged) -> None:
    saga_id = await start(srv, "book", {})
    await settled(srv, saga_id)
    status, _ = await saga(srv, saga_id, sub="someone-else", roles=["clerk"])
    assert status == 404
    status, _ = await saga(srv, saga_id, sub="someone-else")  # an admin holds every permission
    assert status == 200


async def test_over_ws_a_saga_is_started_read_and_resolved_by_the_same_operations(srv: Bridged) -> None:
    ws = await srv.http.ws_connect(f"{srv.api}/default/_ws", headers=srv.auth())
    try:

        async def call(verb: str, **frame: Any) -> dict[str, Any]:
            await ws.send_json({"type": "call", "id": verb, "service": "store/trip", "verb": verb, **frame})
            while True:
                got: dict[str, Any] = await ws.receive_json(timeout=10)
                if got.get("id") == verb:
                    return got

        started = await call("book", body={"faults": {"notify": "timeout_not_applied"}})
        assert started["type"] == "result" and started["status"] == 202, started
        saga_id = started["data"]["id"]
        end = await settled(srv, saga_id)
        assert end["state"] == "outcome_unknown"
        read = await call("_saga", saga=saga_id)
        assert read["data"]["state"] == "outcome_unknown" and read["data"]["timeline"], read
        refused = await call("_saga_skip", saga=saga_id, body={})
        assert refused["type"] == "error" and refused["code"] == "SVC.SAGA.REASON_REQUIRED", refused
        done = await call("_saga_resolve", saga=saga_id, body={"applied": False, "reason": "never sent"})
        assert done["type"] == "result" and done["data"]["state"] == "compensating", done
        assert (await settled(srv, saga_id))["state"] == "compensated"
        assert (await effects(srv, saga_id))["applied"] == []
    finally:
        await ws.close()


async def test_a_saga_and_its_job_end_in_one_statement_only_while_its_holder_holds_it(
    srv: Bridged, pg_dsn: str
) -> None:
    """``saga_store.move(..., finish=, event=)`` ends the saga and its job and emits its event in
    the same statement: a move by a holder that lost the saga (``Lost``) leaves all three as they
    were, even committed alone; its holder's does all three."""
    template = uuid.UUID(await start(srv, "book", {}))
    await settled(srv, str(template))
    pool = await db.open_pool(pg_dsn, 1)
    try:
        async with db.connection(pool) as conn:
            new = await booking_like(conn, template)
            holder = "held:1:here:claim"  # a long lease: no running engine claims it meanwhile
            await saga_store.accept(conn, new, holder, 600.0, None)
            finish = saga_store.Finish("succeeded", {"result": {}, "saga": "completed"}, None, 100.0)
            entry = (None, None, "saga", None, "completed", None)
            event = outbox.emit_args(
                tenant=new.tenant,
                entity="store/trip",
                record_id=new.id,
                action="book",
                event="saga.completed",
                payload={"saga": str(new.id)},
                actor_sub="s",
                actor_username="u",
                request_id=None,
            )
            events = "SELECT count(*) FROM dap.outbox WHERE record_id = $1 AND event = 'saga.completed'"
            with pytest.raises(saga_store.Lost):  # committed alone: nothing of it may apply
                await saga_store.move(
                    conn, new.id, "other:1:x:claim", entry, finish=finish, event=event, state="completed"
                )
            job = await conn.fetchrow("SELECT state, finished_at FROM dap.jobs WHERE id = $1", new.id)
            assert tuple(job) == ("running", None)
            assert await conn.fetchval(events, new.id) == 0
            await saga_store.move(
                conn, new.id, holder, entry, finish=finish, event=event, state="completed", worker=None
            )
            assert await conn.fetchval(events, new.id) == 1
            job = await conn.fetchrow("SELECT state, result, progress FROM dap.jobs WHERE id = $1", new.id)
            saga = await conn.fetchval("SELECT state FROM dap.sagas WHERE id = $1", new.id)
    finally:
        await pool.close()
    assert (job["state"], job["progress"], saga) == ("succeeded", 100.0, "completed")
    assert job["result"] == {"result": {}, "saga": "completed"}
