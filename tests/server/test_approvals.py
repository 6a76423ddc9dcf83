"""Approval gates over real HTTP and Postgres: opening, quorum of distinct eligible principals,
sequential steps, ``when`` skips, ``display_fields`` voiding votes, self-approval, reject with
``on_reject``, the inbox, escalation, the audit trail, and concurrent votes in one process."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server.catalog import machines
from dap.server.events import builtin
from dap.server.workflows import escalations, gates

from .conftest import Running, load, running, token
from .documents_spec import JSON

BUILT_IN = list(builtin.NAMES.values())  # the standard actions' events, written beside these

pytestmark = pytest.mark.asyncio(loop_scope="module")

AP = {
    "ap/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: ap}
spec: {title: Approvals}
""",
    "ap/roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: approver}
spec:
  permissions: [ap.doc.approve]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: committee}
spec:
  permissions: [ap.doc.read]
""",
    "ap/doc.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: doc, module: ap}
spec:
  fields:
    - {name: title, type: string, required: true}
    - {name: amount, type: integer, default: 0}
    - {name: note, type: text}
  actions:
    - {name: publish, audit: true, emits: published}
    - {name: stamp, impl: {type: native, handler: ap-test-stamp}}
    - name: guarded
      conditions:
        - {script: "amount < 1000", message: Too much to ask for.}
  events:
    - {name: published}
  state_machine:
    states: [draft, published, rejected, archived]
    initial: draft
    transitions:
      - name: publish
        from: draft
        to: published
        action: publish
        approval:
          steps:
            - {name: committee, approvers: 2, roles: [committee], display_fields: [title, amount]}
            - {name: manager, roles: [manager], when: "amount > 100"}
          on_reject: {to: rejected}
      - name: solo
        from: draft
        to: published
        approval:
          allow_self_approval: true
          steps:
            - name: any-one
              permission: ap.doc.approve
              escalation: {after: 1s, to_roles: [boss]}
            - {name: seq, mode: sequential, approvers: 2, roles: [first, second]}
      - name: guarded
        from: draft
        to: published
        action: guarded
        approval:
          steps:
            - {name: big, roles: [manager], when: "amount > 100"}
      - name: race
        from: draft
        to: published
        approval:
          steps:
            - {name: trio, approvers: 3, roles: [committee]}
      - name: stamp
        from: draft
        to: published
        action: stamp
        approval:
          steps:
            - {name: one, roles: [manager]}
      - name: quiet
        from: draft
        to: published
        approval:
          steps:
            - {name: slow, roles: [manager], escalation: {after: 1h, to_roles: [boss], notify: false}}
      - {name: archive, from: [draft, published, rejected], to: archived}
  expose: [{type: rest}]
""",
    "ap/inbox.yaml": """
apiVersion: dap.io/v1
kind: ApprovalInbox
metadata: {name: mine, module: ap}
spec:
  title: To approve
  entities: [ap/doc]
""",
}


STAMP = """
import uuid

async def stamp(ctx):
    await ctx.conn.execute("CREATE TABLE IF NOT EXISTS ap_stamps (id uuid, by text)")
    record, by = uuid.UUID(ctx.record["id"]), ctx.principal_username
    await ctx.conn.execute("INSERT INTO ap_stamps VALUES ($1, $2)", record, by)
"""


@pytest.fixture(scope="module")
def stamp_handler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A native handler registered by entry point (group ``dap.actions``), run when approved."""
    root = tmp_path_factory.mktemp("stamp")
    (root / "ap_test_stamp.py").write_text(STAMP)
    info = root / "ap_test_stamp-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ap-test-stamp\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dap.actions]\nap-test-stamp = ap_test_stamp:stamp\n")
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, stamp_handler: None) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(AP), pool_size=8) as r:
        yield r


def who(name: str, *roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub=f'u-{name}', username=name, roles=list(roles))}"}


REQUESTER = who("rita", "admin")


async def call(
    srv: Running, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    hdrs = {**(headers or REQUESTER), **JSON}
    async with srv.http.request(method, f"{srv.api}/default/api/{path}", json=body, headers=hdrs) as resp:
        return resp.status, (await resp.json() if resp.status != 204 else {})


async def doc(srv: Running, **fields: Any) -> dict[str, Any]:
    status, answer = await call(srv, "POST", "ap/doc", {"title": "plan", **fields})
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data


async def ask(srv: Running, record: dict[str, Any], action: str = "publish") -> dict[str, Any]:
    status, answer = await call(srv, "POST", f"ap/doc/{record['id']}/{action}")
    assert status == 202, answer
    assert answer["data"]["state"] == "draft" and answer["data"]["version"] == record["version"]
    approval: dict[str, Any] = answer["approval"]
    return approval


async def vote(
    srv: Running, approval: dict[str, Any], headers: dict[str, str], *, reject: str | None = None
) -> tuple[int, dict[str, Any]]:
    verb = "approve" if reject is None else "reject"
    body = {"comment": reject} if reject is not None else None
    return await call(srv, "POST", f"_approvals/{approval['id']}/{verb}", body, headers)


async def audit_actions(pg_dsn: str, record_id: str) -> list[str]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT action FROM dap.audit_log WHERE record_id = $1 ORDER BY id", uuid.UUID(record_id)
        )
    finally:
        await conn.close()
    return [r["action"] for r in rows]


async def test_the_gate_is_compiled_with_its_steps() -> None:
    resource = load(AP).resource("ap", "doc")
    assert resource is not None
    move = resource.workflow["publish"].move
    assert move is not None and move.gate is not None
    gate = move.gate
    assert [s.name for s in gate.steps] == ["committee", "manager"] and gate.reject_to == "rejected"
    assert gate.steps[0].approvers == 2 and gate.steps[1].approvers == 1  # quorum default 1
    solo = resource.workflow["solo"].move
    assert solo is not None and solo.gate is not None and solo.gate.self_approval
    assert solo.gate.steps[0].escalate_after == 1.0 and solo.gate.steps[0].escalate_to == ("boss",)


async def test_sequential_steps_need_their_roles_in_order() -> None:
    step = machines.Step("s", "s", True, 3, ("a", "b"), None, (), None, None, (), False)
    assert gates.roles_now(step, 0) == ("a",) and gates.roles_now(step, 1) == ("b",)
    assert gates.roles_now(step, 2) == ("b",)  # past the list: its last role

    def allows(roles: tuple[str, ...], permission: str) -> bool:
        return False

    kw: dict[str, Any] = {"escalated": False, "requester": "r", "self_approval": False, "allows": allows}
    assert gates.refusal(step, gates.Voter("x", ("b",)), votes=0, **kw) is not None
    assert gates.refusal(step, gates.Voter("x", ("a",)), votes=0, **kw) is None


async def test_requesting_opens_an_approval_instead_of_moving(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    assert approval["status"] == "pending" and approval["step"]["name"] == "committee"
    assert approval["step"]["approvers"] == 2 and approval["step"]["votes"] == 0
    # a second request while one is open: 409, nothing new
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/publish")
    assert status == 409 and answer["code"] == "SVC.APPROVAL.PENDING", answer
    status, answer = await call(srv, "GET", f"ap/doc/{d['id']}")
    assert answer["data"]["state"] == "draft"
    assert "approval.requested" in await audit_actions(pg_dsn, d["id"])


async def test_quorum_needs_distinct_eligible_principals_then_the_transition_runs(
    srv: Running, pg_dsn: str
) -> None:
    d = await doc(srv, amount=50)  # amount <= 100: the manager step is skipped
    approval = await ask(srv, d)
    ann, bob = who("ann", "committee"), who("bob", "committee")
    status, answer = await vote(srv, approval, who("eve", "buyer"))
    assert status == 403 and answer["code"] == "SVC.APPROVAL.NOT_ELIGIBLE", answer
    status, answer = await vote(srv, approval, ann)
    assert status == 200 and answer["approval"]["step"]["votes"] == 1, answer
    status, answer = await vote(srv, approval, ann)  # the same principal again
    assert status == 409 and answer["code"] == "SVC.APPROVAL.ALREADY_VOTED", answer
    status, answer = await vote(srv, approval, bob)
    assert status == 200, answer
    assert answer["approval"]["status"] == "approved"
    assert answer["data"]["state"] == "published" and answer["data"]["version"] == d["version"] + 1
    status, found = await call(srv, "GET", f"ap/doc/{d['id']}")
    assert found["data"]["state"] == "published"
    status, answer = await vote(srv, approval, who("cid", "committee"))
    assert status == 409 and answer["code"] == "SVC.APPROVAL.CLOSED"
    actions = await audit_actions(pg_dsn, d["id"])
    assert actions.count("approval.approved-vote") == 2 and "approval.skipped" in actions
    assert "publish" in actions and actions[-1] == "approval.approved"
    conn = await asyncpg.connect(pg_dsn)
    try:
        events = await conn.fetch(
            "SELECT event FROM dap.outbox WHERE record_id = $1 AND NOT event = ANY($2::text[])",
            uuid.UUID(d["id"]),
            BUILT_IN,
        )
    finally:
        await conn.close()
    assert [e["event"] for e in events] == ["published"]
    status, one = await call(srv, "GET", f"_approvals/{approval['id']}")
    assert status == 200 and [v["by"] for v in one["data"]["votes"]] == ["ann", "bob"]
    assert one["data"]["history"][0]["event"] == "requested"


async def test_steps_run_in_order_and_when_starts_the_manager_step(srv: Running) -> None:
    d = await doc(srv, amount=500)
    approval = await ask(srv, d)
    manager = who("max", "manager")
    status, answer = await vote(srv, approval, manager)  # not yet: the committee step runs first
    assert status == 403, answer
    for name in ("ann", "bob"):
        status, answer = await vote(srv, approval, who(name, "committee"))
        assert status == 200, answer
    assert answer["approval"]["step"]["name"] == "manager" and "data" not in answer
    status, answer = await vote(srv, approval, manager)
    assert status == 200 and answer["data"]["state"] == "published", answer


async def test_every_step_skipped_moves_at_once(srv: Running) -> None:
    d = await doc(srv, amount=5)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/guarded")
    assert status == 200 and answer["data"]["state"] == "published" and "approval" not in answer, answer


async def test_conditions_are_checked_when_the_gate_opens(srv: Running) -> None:
    d = await doc(srv, amount=5000)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/guarded")
    assert status == 422 and "Too much" in str(answer), answer


async def test_the_requester_may_not_approve_unless_the_gate_allows_it(srv: Running) -> None:
    requester = who("ann", "committee", "approver")
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/publish", None, requester)
    assert status == 202, answer
    status, answer = await vote(srv, answer["approval"], requester)
    assert status == 403 and answer["code"] == "SVC.APPROVAL.SELF_APPROVAL", answer
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/solo", None, requester)
    assert status == 202, answer
    status, answer = await vote(srv, answer["approval"], requester)  # allow_self_approval: true
    assert status == 200 and answer["approval"]["step"]["name"] == "seq", answer


async def test_sequential_mode_takes_the_roles_in_turn(srv: Running) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/solo")
    approval = answer["approval"]
    status, answer = await vote(srv, approval, who("pat", "approver"))
    assert status == 200 and answer["approval"]["step"]["roles"] == ["first"], answer
    status, answer = await vote(srv, approval, who("sam", "second"))
    assert status == 403, answer
    status, answer = await vote(srv, approval, who("fay", "first"))
    assert status == 200 and answer["approval"]["step"]["roles"] == ["second"], answer
    status, answer = await vote(srv, approval, who("sam", "second"))
    assert status == 200 and answer["data"]["state"] == "published", answer


async def test_editing_a_display_field_voids_open_votes(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    status, answer = await vote(srv, approval, who("ann", "committee"))
    assert status == 200
    status, answer = await call(srv, "PATCH", f"ap/doc/{d['id']}", {"note": "not displayed"})
    assert status == 200
    status, answer = await vote(srv, approval, who("bob", "committee"))
    assert status == 200 and answer["approval"]["status"] == "approved", answer  # note is not displayed
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    status, answer = await vote(srv, approval, who("ann", "committee"))
    status, answer = await call(srv, "PATCH", f"ap/doc/{d['id']}", {"amount": 60})
    assert status == 200
    status, answer = await vote(srv, approval, who("bob", "committee"))
    assert status == 200 and answer["approval"]["step"]["votes"] == 1, answer  # ann's vote was voided
    status, answer = await vote(srv, approval, who("ann", "committee"))  # ann votes again
    assert status == 200 and answer["approval"]["status"] == "approved", answer
    assert "approval.voided" in await audit_actions(pg_dsn, d["id"])
    status, one = await call(srv, "GET", f"_approvals/{approval['id']}")
    assert [(v["by"], v["void"]) for v in one["data"]["votes"]] == [
        ("ann", True),
        ("bob", False),
        ("ann", False),
    ]


async def test_reject_needs_a_comment_and_moves_to_on_reject(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    status, answer = await call(
        srv, "POST", f"_approvals/{approval['id']}/reject", {}, who("ann", "committee")
    )
    assert status == 422 and answer["errors"][0]["path"] == "comment", answer
    status, answer = await vote(srv, approval, who("ann", "committee"), reject="wrong supplier")
    assert status == 200, answer
    assert answer["approval"]["status"] == "rejected" and answer["data"]["state"] == "rejected"
    assert answer["approval"]["history"][-1]["comment"] == "wrong supplier"
    assert "approval.rejected" in await audit_actions(pg_dsn, d["id"])
    status, trail = await call(srv, "GET", f"ap/doc/{d['id']}/_audit")
    assert any(r["changes"].get("approval", {}).get("comment") == "wrong supplier" for r in trail["data"])


async def test_a_record_moved_elsewhere_cancels_its_approval(srv: Running) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    status, answer = await call(srv, "GET", "_approvals?limit=500", None, who("ann", "committee"))
    assert approval["id"] in [a["id"] for a in answer["data"]]
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/archive")
    assert status == 200, answer
    status, answer = await call(srv, "GET", "_approvals?limit=500", None, who("ann", "committee"))
    assert approval["id"] not in [a["id"] for a in answer["data"]]  # no longer offered
    status, answer = await vote(srv, approval, who("ann", "committee"))
    assert status == 409 and answer["code"] == "SVC.APPROVAL.STALE", answer
    status, one = await call(srv, "GET", f"_approvals/{approval['id']}")
    assert one["data"]["status"] == "cancelled"


async def test_the_inbox_lists_what_i_may_vote_on_now(srv: Running, pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("UPDATE dap.approvals SET status = 'cancelled' WHERE status = 'pending'")
    await conn.close()
    first, second = await doc(srv, title="first", amount=500), await doc(srv, title="second", amount=7)
    a1, a2 = await ask(srv, first), await ask(srv, second)
    ann = who("ann", "committee")
    status, answer = await call(srv, "GET", "_approvals", None, ann)
    assert status == 200, answer
    assert [a["id"] for a in answer["data"]] == [a1["id"], a2["id"]]
    assert answer["data"][0]["display"] == {"title": "first", "amount": 500}
    status, answer = await call(srv, "GET", "_approvals?inbox=ap/mine&limit=1", None, ann)
    assert status == 200 and [a["id"] for a in answer["data"]] == [a1["id"]], answer
    status, answer = await call(srv, "GET", "_approvals?inbox=ap/nope", None, ann)
    assert status == 404
    await vote(srv, a1, ann)
    status, answer = await call(srv, "GET", "_approvals", None, ann)  # voted on: gone from the inbox
    assert [a["id"] for a in answer["data"]] == [a2["id"]]
    status, answer = await call(srv, "GET", "_approvals", None, who("max", "manager"))
    assert answer["data"] == []  # the manager step has not started
    await vote(srv, a1, who("bob", "committee"))
    status, answer = await call(srv, "GET", "_approvals", None, who("max", "manager"))
    assert [a["id"] for a in answer["data"]] == [a1["id"]] and answer["data"][0]["step"]["name"] == "manager"
    status, answer = await call(
        srv, "GET", "_approvals", None, REQUESTER
    )  # my own requests: not mine to vote
    assert answer["data"] == []


async def test_escalation_fires_once_and_widens_the_step(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/solo")
    approval = answer["approval"]
    boss = who("bea", "boss")
    status, answer = await vote(srv, approval, boss)
    assert status == 403, answer  # not before the escalation
    for _ in range(100):
        await asyncio.sleep(0.1)
        status, one = await call(srv, "GET", f"_approvals/{approval['id']}")
        if one["data"]["step"]["escalated"]:
            break
    assert one["data"]["step"]["escalated"], one
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await escalations.fire_due(conn) == 0  # fired already: never again
        fired = await conn.fetchval(
            "SELECT count(*) FROM dap.audit_log WHERE record_id = $1 AND action = 'approval.escalated'",
            uuid.UUID(d["id"]),
        )
        events = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE record_id = $1 AND event = 'approval.escalated'",
            uuid.UUID(d["id"]),
        )
    finally:
        await conn.close()
    assert fired == 1 and events == 1
    status, answer = await call(srv, "GET", "_approvals", None, boss)
    assert approval["id"] in [a["id"] for a in answer["data"]]
    status, answer = await vote(srv, approval, boss)
    assert status == 200 and answer["approval"]["step"]["name"] == "seq", answer


async def test_concurrent_votes_advance_once(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    voters = [who(f"c{i}", "committee") for i in range(10)]
    answers = await asyncio.gather(*(vote(srv, approval, v) for v in voters))
    statuses = sorted(s for s, _ in answers)
    assert statuses == [200, 200] + [409] * 8, answers
    assert sum(1 for _, a in answers if "data" in a) == 1
    _, found = await call(srv, "GET", f"ap/doc/{d['id']}")
    assert found["data"]["version"] == d["version"] + 1


async def test_unknown_approval_is_404(srv: Running) -> None:
    status, answer = await call(
        srv, "POST", f"_approvals/{uuid.uuid4()}/approve", None, who("ann", "committee")
    )
    assert status == 404 and answer["code"] == "SVC.APPROVAL.NOT_FOUND"
    status, answer = await call(srv, "GET", "_approvals/not-a-uuid")
    assert status == 404


async def test_openapi_and_ui_metadata_describe_approvals(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json") as resp:
        doc = await resp.json()
    assert {"/api/_approvals", "/api/_approvals/{id}", "/api/_approvals/{id}/approve"} <= set(doc["paths"])
    assert (
        "comment"
        in doc["paths"]["/api/_approvals/{id}/reject"]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ]["required"]
    )
    assert "202" in doc["paths"]["/api/ap/doc/{id}/publish"]["post"]["responses"]
    assert "Approval" in doc["components"]["schemas"]
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/entities/ap/doc", headers=REQUESTER) as resp:
        meta = (await resp.json())["data"]
    publish = next(t for t in meta["state_machine"]["transitions"] if t["name"] == "publish")
    steps = publish["approval"]["steps"]
    assert [(s["name"], s["approvers"], s["display_fields"]) for s in steps] == [
        ("committee", 2, ["title", "amount"]),
        ("manager", 1, []),
    ]
    assert publish["approval"]["on_reject"] == "rejected"
    archive = next(t for t in meta["state_machine"]["transitions"] if t["name"] == "archive")
    assert archive["approval"] is None


async def test_an_escalation_without_notify_writes_no_event(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/quiet")
    assert status == 202, answer
    assert answer["approval"]["step"]["escalate_at"] is not None
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "UPDATE dap.approvals SET escalate_at = now() - interval '1 second' WHERE id = $1",
            uuid.UUID(answer["approval"]["id"]),
        )
        await escalations.fire_due(conn)  # this test's pass, or the server's loop: either fires it
        record = uuid.UUID(d["id"])
        fired = await conn.fetchval(
            "SELECT count(*) FROM dap.audit_log WHERE record_id = $1 AND action = 'approval.escalated'",
            record,
        )
        events = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE record_id = $1 AND NOT event = ANY($2::text[])",
            record,
            BUILT_IN,
        )
    finally:
        await conn.close()
    assert (fired, events) == (1, 0)


async def test_if_match_is_checked_before_an_approval_opens(srv: Running) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/publish")
    assert status == 202
    # an If-Match of another version is refused before any approval opens
    d2 = await doc(srv)
    hdrs = {**REQUESTER, "If-Match": '"999"'}
    status, answer = await call(srv, "POST", f"ap/doc/{d2['id']}/publish", None, hdrs)
    assert status == 412, answer
    status, answer = await call(srv, "GET", "_approvals", None, who("ann", "committee"))
    assert d2["id"] not in [a["record_id"] for a in answer["data"]]


async def test_a_native_handler_runs_when_the_approval_completes(srv: Running, pg_dsn: str) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/stamp")
    assert status == 202, answer
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS ap_stamps (id uuid, by text)")
        assert await conn.fetch("SELECT * FROM ap_stamps WHERE id = $1", uuid.UUID(d["id"])) == []
        status, answer = await vote(srv, answer["approval"], who("max", "manager"))
        assert status == 200 and answer["data"]["state"] == "published", answer
        stamped = await conn.fetch("SELECT by FROM ap_stamps WHERE id = $1", uuid.UUID(d["id"]))
    finally:
        await conn.close()
    assert [r["by"] for r in stamped] == ["max"]  # once, as the deciding approver


async def test_an_edit_restarts_a_sequential_step_from_its_first_role(srv: Running) -> None:
    d = await doc(srv)
    status, answer = await call(srv, "POST", f"ap/doc/{d['id']}/solo")
    approval = answer["approval"]
    status, answer = await vote(srv, approval, who("pat", "approver"))
    status, answer = await vote(srv, approval, who("fay", "first"))
    assert status == 200 and answer["approval"]["step"]["roles"] == ["second"], answer
    # the step displays no field: its votes are tied to the version, which any edit bumps
    status, answer = await call(srv, "PATCH", f"ap/doc/{d['id']}", {"note": "changed"})
    assert status == 200
    status, answer = await vote(srv, approval, who("sam", "second"))
    assert status == 403 and "first" in answer["detail"], answer  # fay's vote no longer counts
    status, answer = await vote(srv, approval, who("fay", "first"))  # fay signs the new version
    assert status == 200 and answer["approval"]["step"]["votes"] == 1, answer
    status, answer = await vote(srv, approval, who("sam", "second"))
    assert status == 200 and answer["data"]["state"] == "published", answer


async def test_a_records_approvals_are_listed_on_the_record(srv: Running) -> None:
    d = await doc(srv, amount=50)
    approval = await ask(srv, d)
    await vote(srv, approval, who("ann", "committee"), reject="no")
    status, answer = await call(srv, "GET", f"ap/doc/{d['id']}/_approvals")
    assert status == 200, answer
    assert [(a["id"], a["status"]) for a in answer["data"]] == [(approval["id"], "rejected")]
    status, answer = await call(srv, "GET", f"ap/doc/{uuid.uuid4()}/_approvals")
    assert status == 404
    async with srv.http.get(f"{srv.api}/default/api/openapi.json") as resp:
        doc_ = await resp.json()
    assert "/api/ap/doc/{id}/_approvals" in doc_["paths"]
