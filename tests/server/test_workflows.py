"""Custom actions and state machines over real HTTP and Postgres: the ``state`` field, transitions
from every kind of state, params, conditions, permissions, native and sidecar impls, the outbox,
the audit trail, ``If-Match``, idempotency, rate limits across two servers, and racing moves."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap import config
from dap.server.catalog import Catalog, machines

from .conftest import Running, load, running, token
from .documents_spec import JSON

pytestmark = pytest.mark.asyncio(loop_scope="module")

WF = {
    "wf/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: wf}
spec: {title: Workflows}
""",
    "wf/ticket.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: ticket, module: wf}
spec:
  fields:
    - {name: title, type: string, required: true}
    - {name: note, type: text}
    - {name: assignee, type: string}
  assignments:
    - {dimension: assignee, field: assignee, principal_field: username}
  actions:
    - {name: start, audit: true, emits: started}
    - name: close
      audit: true
      params:
        fields:
          - {name: reason, type: string, required: true}
          - {name: minutes, type: integer}
      conditions:
        - {script: "len(note) > 0", message: Write a note before closing the ticket.}
        - {field: minutes, expression: "params.minutes == null or params.minutes < 1000"}
    - name: ping
      rate_limit: {requests: 3, per: 60s}
      impl: {type: native, handler: wf-test-echo}
    - name: bump
      idempotent: true
      emits: bumped
      impl: {type: native, handler: wf-test-echo}
    - {name: sync, impl: {type: sidecar}}
    - {name: lost, impl: {type: native, handler: wf-no-such-handler}}
    - {name: escalate, required_permission: wf.ticket.escalate}
    - {name: archive, disabled: true}
    - {name: shout}
  events:
    - {name: started}
    - {name: bumped}
  state_machine:
    states: [new, open, closed]
    initial: new
    transitions:
      - {name: start, from: new, to: open, action: start}
      - {name: close, from: [new, open], to: closed, action: close}
      - {name: reopen, from: closed, to: open}
      - {name: escalate, from: open, to: open, action: escalate}
      - name: archive
        from: closed
        to: closed
        action: archive
  expose: [{type: rest}]
""",
}

HANDLERS = """
async def echo(ctx):
    return {"params": dict(ctx.params), "title": ctx.record["title"], "entity": ctx.entity}
"""


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real entry point of the group ``dap.actions``: an installed distribution's metadata on sys.path."""
    root = tmp_path_factory.mktemp("handlers")
    (root / "wf_test_handlers.py").write_text(HANDLERS)
    info = root / "wf_test_handlers-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wf-test-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dap.actions]\nwf-test-echo = wf_test_handlers:echo\n")
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(WF), pool_size=8) as r:
        yield r


async def call(
    srv: Running, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    hdrs = {**srv.auth(), **JSON, **headers}
    async with srv.http.request(method, f"{srv.api}/default/api/wf/{path}", json=body, headers=hdrs) as resp:
        answer = await resp.json() if resp.status != 204 else {}
        return resp.status, answer, {k.lower(): v for k, v in resp.headers.items()}


async def ticket(srv: Running, **fields: Any) -> dict[str, Any]:
    status, answer, _ = await call(srv, "POST", "ticket", {"title": "printer", **fields})
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data


async def act(srv: Running, record: dict[str, Any], action: str, body: Any = None, **headers: str) -> Any:
    return await call(srv, "POST", f"ticket/{record['id']}/{action}", body, **headers)


async def test_the_state_field_is_a_read_only_enum_column() -> None:
    catalog: Catalog = load(WF)
    resource = catalog.resource("wf", "ticket")
    assert resource is not None
    f = resource.fields[machines.STATE]
    assert f.enum_values == ("new", "open", "closed") and f.read_only and f.default == "new"
    assert resource.table.column_for(machines.STATE) is not None
    assert resource.workflow["reopen"].declared is None  # a transition without action: its name
    assert resource.workflow["close"].move is not None and resource.workflow["close"].move.origins == (
        "new",
        "open",
    )


async def test_a_field_named_state_beside_a_state_machine_is_refused() -> None:
    files = dict(WF)
    files["wf/ticket.yaml"] = files["wf/ticket.yaml"].replace(
        "- {name: note, type: text}", "- {name: note, type: text}\n    - {name: state, type: string}"
    )
    with pytest.raises(config.SpecError, match="'state' cannot sit beside a state_machine"):
        config.load_files(files)


async def test_create_starts_in_the_initial_state_and_state_filters_and_sorts(srv: Running) -> None:
    t = await ticket(srv)
    assert t["state"] == "new"
    status, answer, _ = await call(srv, "GET", f"ticket?state=new&id={t['id']}")
    assert status == 200 and [r["id"] for r in answer["data"]] == [t["id"]]
    status, answer, _ = await call(srv, "GET", f"ticket?state[in]=open,closed&id={t['id']}")
    assert status == 200 and answer["data"] == []
    status, answer, _ = await call(srv, "GET", "ticket?sort=-state&limit=5")
    assert status == 200, answer
    status, answer, _ = await call(srv, "GET", "ticket?state=bogus")
    assert status == 400, answer
    status, answer, _ = await call(srv, "PATCH", f"ticket/{t['id']}", {"state": "closed"})
    assert status == 422 and answer["errors"][0]["path"] == "state", answer
    status, answer, _ = await call(srv, "POST", "ticket", {"title": "x", "state": "closed"})
    assert status == 422, answer


async def test_a_transition_moves_bumps_audits_and_emits(srv: Running, pg_dsn: str) -> None:
    t = await ticket(srv)
    status, answer, headers = await act(srv, t, "start")
    assert status == 200, answer
    assert answer["data"]["state"] == "open" and answer["data"]["version"] == t["version"] + 1
    assert answer["transition"] == {"from": "new", "to": "open"}
    assert headers["etag"] == f'"{t["version"] + 1}"'
    conn = await asyncpg.connect(pg_dsn)
    try:
        audit = await conn.fetch(
            "SELECT action, changes::text FROM dap.audit_log WHERE record_id = $1", uuid.UUID(t["id"])
        )
        assert [(r["action"], r["changes"]) for r in audit if r["action"] == "start"] == [
            ("start", '{"state": ["new", "open"]}')
        ]
        events = await conn.fetch(
            "SELECT public_id, event, entity, action, payload::text, delivered_at FROM dap.outbox "
            "WHERE record_id = $1 AND action = 'start'",  # the create's built-in event aside
            uuid.UUID(t["id"]),
        )
    finally:
        await conn.close()
    assert len(events) == 1 and str(events[0]["public_id"]) == answer["event"]
    assert (events[0]["event"], events[0]["entity"], events[0]["action"]) == ("started", "wf/ticket", "start")
    assert '"to": "open"' in events[0]["payload"]  # delivered (or not yet) by the events dispatcher
    status, found, _ = await call(srv, "GET", f"ticket/{t['id']}")
    assert found["data"]["state"] == "open"  # the cached answer was dropped


async def test_a_move_not_allowed_from_the_current_state_is_409_and_changes_nothing(srv: Running) -> None:
    t = await ticket(srv)
    status, answer, _ = await act(srv, t, "reopen")
    assert status == 409 and answer["code"] == "SVC.STATE.TRANSITION_NOT_ALLOWED", answer
    assert "'closed'" in answer["detail"] and "'new'" in answer["detail"]
    assert "start" in answer["detail"]  # says what can run from here
    _, found, _ = await call(srv, "GET", f"ticket/{t['id']}")
    assert found["data"]["state"] == "new" and found["data"]["version"] == t["version"]


async def test_params_are_validated_with_every_problem(srv: Running) -> None:
    t = await ticket(srv, note="done")
    status, answer, _ = await act(srv, t, "close", {"minutes": "ten", "extra": 1})
    assert status == 422 and answer["code"] == "SVC.ACTION.PARAMS_INVALID", answer
    assert {e["path"] for e in answer["errors"]} == {"reason", "minutes", "extra"}
    status, answer, _ = await act(srv, t, "close", {"reason": "fixed", "minutes": 5})
    assert status == 200 and answer["data"]["state"] == "closed", answer
    status, answer, _ = await act(srv, t, "reopen")
    assert status == 200 and answer["data"]["state"] == "open", answer


async def test_conditions_of_both_forms_refuse_with_the_declared_message(srv: Running) -> None:
    t = await ticket(srv)
    status, answer, _ = await act(srv, t, "close", {"reason": "x", "minutes": 5000})
    assert status == 422, answer
    assert "Write a note before closing the ticket." in answer["detail"]
    assert {e["path"] for e in answer["errors"]} == {"close", "minutes"}
    _, found, _ = await call(srv, "GET", f"ticket/{t['id']}")
    assert found["data"]["state"] == "new"


async def test_if_match_is_honoured(srv: Running) -> None:
    t = await ticket(srv)
    status, answer, _ = await act(srv, t, "start", None, **{"If-Match": f'"{t["version"] + 7}"'})
    assert status == 412, answer
    status, answer, _ = await act(srv, t, "start", None, **{"If-Match": f'"{t["version"]}"'})
    assert status == 200, answer


async def test_permission_disabled_and_unknown_actions(srv: Running) -> None:
    t = await ticket(srv)
    await act(srv, t, "start")
    clerk = {"Authorization": f"Bearer {token(roles=['clerk'])}"}
    status, answer, _ = await act(srv, t, "escalate", None, **clerk)
    assert status == 403 and "wf.ticket.escalate" in answer["detail"], answer
    status, answer, _ = await act(srv, t, "escalate")  # admin holds every permission
    assert status == 200 and answer["transition"] == {"from": "open", "to": "open"}, answer
    status, answer, _ = await act(srv, t, "archive")
    assert status == 404, answer
    status, answer, _ = await act(srv, t, "no_such_action")
    assert status == 404, answer


async def test_row_scope_applies_to_actions(srv: Running) -> None:
    theirs = await ticket(srv, assignee="carol")
    mine = await ticket(srv, assignee="bob")
    bob = {"Authorization": f"Bearer {token(sub='u-bob', username='bob', roles=['clerk'])}"}
    status, answer, _ = await act(srv, theirs, "start", None, **bob)
    assert status == 403 and answer["code"] == "SVC.AUTH.ROW_SCOPE", answer
    _, found, _ = await call(srv, "GET", f"ticket/{theirs['id']}")
    assert found["data"]["state"] == "new"
    status, answer, _ = await act(srv, mine, "start", None, **bob)
    assert status == 200 and answer["data"]["state"] == "open", answer


async def test_impls_that_cannot_run_say_what_is_missing(srv: Running) -> None:
    t = await ticket(srv)
    status, answer, _ = await act(srv, t, "sync")
    assert status == 501 and "--sidecar-endpoint" in answer["detail"], answer
    status, answer, _ = await act(srv, t, "lost")
    assert status == 501 and answer["code"] == "SVC.ACTION.HANDLER_NOT_REGISTERED", answer
    assert "wf-no-such-handler" in answer["detail"] and "dap.actions" in answer["detail"]
    status, answer, _ = await act(srv, t, "shout")
    assert status == 501 and answer["code"] == "SVC.ACTION.NOT_IMPLEMENTED", answer


async def test_a_native_handler_runs_and_answers_its_result(srv: Running) -> None:
    t = await ticket(srv, title="scanner")
    status, answer, _ = await act(srv, t, "bump")
    assert status == 200, answer
    assert answer["result"] == {"params": {}, "title": "scanner", "entity": "wf/ticket"}
    assert answer["data"]["version"] == t["version"]  # no transition: the record is as it was


async def test_an_idempotent_action_has_one_effect_per_key(srv: Running, pg_dsn: str) -> None:
    t = await ticket(srv)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = await act(srv, t, "bump", None, **key)
    second = await act(srv, t, "bump", None, **key)
    assert first[0] == second[0] == 200
    assert first[1] == second[1] and second[2].get("idempotent-replayed") == "true"
    other = await act(srv, t, "bump", {"x": 1}, **key)
    assert other[0] == 422, other[1]  # a param it does not declare, or the key reused: both refuse
    assert await outbox_rows(pg_dsn, t["id"], "bump") == 1


async def outbox_rows(pg_dsn: str, record_id: str, action: str) -> int:
    conn = await asyncpg.connect(pg_dsn)
    try:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE record_id = $1 AND action = $2",
            uuid.UUID(record_id),
            action,
        )
        return n
    finally:
        await conn.close()


async def test_concurrent_duplicates_of_an_idempotent_action_have_one_effect(
    srv: Running, pg_dsn: str
) -> None:
    t = await ticket(srv)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    results = await asyncio.gather(*(act(srv, t, "bump", None, **key) for _ in range(6)))
    statuses = [r[0] for r in results]
    assert set(statuses) <= {200, 409} and 200 in statuses, [r[1] for r in results]
    assert await outbox_rows(pg_dsn, t["id"], "bump") == 1


async def test_two_concurrent_transitions_of_one_record_exactly_one_wins(srv: Running) -> None:
    for _ in range(5):
        t = await ticket(srv)
        results = await asyncio.gather(*(act(srv, t, "start") for _ in range(8)))
        statuses = sorted(r[0] for r in results)
        assert statuses == [200] + [409] * 7, [r[1] for r in results]
        _, found, _ = await call(srv, "GET", f"ticket/{t['id']}")
        assert found["data"]["version"] == t["version"] + 1


async def test_rate_limit_is_shared_by_two_servers(pg_dsn: str, registered: None) -> None:
    catalog = load(WF)
    async with running(pg_dsn, catalog) as one, running(pg_dsn, catalog) as two:
        t = await ticket(one)
        sub = f"rate-{uuid.uuid4().hex}"  # a caller of its own: the budget is per principal
        hdrs = {"Authorization": f"Bearer {token(sub=sub)}"}
        got = []
        for server in (one, two, one, two):
            status, answer, headers = await act(server, t, "ping", {}, **hdrs)
            got.append(status)
        assert got == [200, 200, 200, 429], got
        assert answer["status"] == 429 and int(headers["retry-after"]) >= 1


async def test_openapi_and_ui_metadata_describe_the_state_and_actions(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json", headers=srv.auth()) as resp:
        doc = await resp.json()
    record = doc["components"]["schemas"]["wf.ticket"]["properties"]["state"]
    assert "closed" in str(record) and "new" in str(record)
    assert "state" not in doc["components"]["schemas"]["wf.ticket.create"]["properties"]  # read-only
    listing = doc["paths"]["/api/wf/ticket"]["get"]["parameters"]
    assert any(p["name"].startswith("state") for p in listing)
    close = doc["paths"]["/api/wf/ticket/{id}/close"]["post"]
    body = close["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["reason"] and set(body["properties"]) == {"reason", "minutes"}
    assert "new, open → closed" in close["summary"] and "429" in close["responses"]
    assert "/api/wf/ticket/{id}/reopen" in doc["paths"]
    assert "/api/wf/ticket/{id}/archive" not in doc["paths"]  # disabled
    for answers_501 in ("sync", "lost", "shout"):  # sidecar, unregistered handler, nothing to run
        assert f"/api/wf/ticket/{{id}}/{answers_501}" not in doc["paths"]
    assert "/api/wf/ticket/{id}/ping" in doc["paths"]  # its native handler is registered
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/entities/wf/ticket", headers=srv.auth()) as resp:
        meta = (await resp.json())["data"]
    machine = meta["state_machine"]
    assert machine["field"] == "state" and machine["states"] == ["new", "open", "closed"]
    reopen = next(t for t in machine["transitions"] if t["name"] == "reopen")
    assert reopen == {
        "name": "reopen",
        "action": "reopen",
        "from": ["closed"],
        "to": "open",
        "approval": None,  # no gate (a gate is described: web.ui_meta._gate)
        "params": [],
    }
    state = next(f for f in meta["fields"] if f["name"] == "state")
    assert state["read_only"] is True
