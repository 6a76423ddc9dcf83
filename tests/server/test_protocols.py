"""The same cases over REST and gRPC give the same outcomes: one operation per verb, two adapters.

Each case runs once per protocol on records of its own (a tag per run) and the two outcomes --
``"ok"`` with the values that matter, or the ``SVC.*`` code -- must be equal; each case also pins
the outcome it expects, so that two equally wrong adapters do not pass. Then what gRPC alone has:
reflection, an entity without ``grpc`` in ``expose`` having no service, ``dap schema --proto``.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
import pytest_asyncio
from click.testing import CliRunner
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dap.server import cli as server_cli
from dap.server import state
from dap.server.rpc import descriptors
from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options
from .protocols_spec import PACKAGE, SPEC, Grpc, Outcome, Rest, Ws, bearer
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN = bearer("root", "admin")
CLERK = bearer("carl", "clerk")
BOB = bearer("bob", "clerk")
MANAGER = bearer("meg", "manager")
NOBODY = bearer("nils")


class Both:
    def __init__(self, rest: Rest, rpc: Grpc, ws: Ws, port: int) -> None:
        self.rest, self.rpc, self.ws, self.port = rest, rpc, ws, port


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The actions' native handlers (``ops-test-echo``), installed as a deployed app installs them."""
    root = install_handlers(tmp_path_factory.mktemp("protocol-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def both(pg_dsn: str, registered: None) -> AsyncIterator[Both]:
    catalog = load(SPEC)
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), catalog)
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            assert rpc.pool is not None
            running = Running(server, http)
            yield Both(Rest(running), Grpc(ch, rpc.pool), Ws(running), rpc.port)
    finally:
        await server.stop()


Client = Rest | Grpc | Ws
Case = Callable[[Client, str], Awaitable[Any]]


def pick(outcome: Outcome, *keys: str) -> Outcome:
    """The code and the named values as text (gRPC's JSON writes int64 as strings)."""
    code, data = outcome
    if code != "ok" or data is None:
        return code, None
    if isinstance(data, list):
        return code, sorted(tuple(str(row.get(k)) for k in keys) for row in data)
    return code, {k: str(data.get(k)) for k in keys}


async def created(
    c: Client, entity: str, body: dict[str, Any], who: str = ADMIN, **kw: Any
) -> dict[str, Any]:
    code, data = await c.create(entity, body, who, **kw)
    assert code == "ok", (c.name, code)
    return dict(data)


# --- the cases: each returns a comparable outcome ----------------------------------------


async def create_and_read_back(c: Client, tag: str) -> Any:
    body = {"name": f"{tag}-acme", "credit": "12.50", "visits": 3, "vip": True, "tags": ["a", "b"]}
    row = await created(c, "customer", body)
    return pick(
        await c.find("customer", row["id"], ADMIN), "name", "credit", "visits", "vip", "tags", "version"
    )


async def validation_missing_required(c: Client, tag: str) -> Any:
    return await c.create("customer", {"visits": 1}, ADMIN)


async def validation_wrong_type(c: Client, tag: str) -> Any:
    return await c.create("customer", {"name": f"{tag}", "credit": "lots"}, ADMIN)


async def permission_refused(c: Client, tag: str) -> Any:
    return await c.create("order", {"number": f"{tag}-1"}, NOBODY)


async def no_token(c: Client, tag: str) -> Any:
    return await c.find("order", str(uuid.uuid4()), None)


async def unknown_record(c: Client, tag: str) -> Any:
    return await c.find("customer", str(uuid.uuid4()), ADMIN)


async def malformed_id(c: Client, tag: str) -> Any:
    return await c.find("customer", "not-an-id", ADMIN)


async def field_permission_hides(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-c", "credit": "5.00"})
    clerk = pick(await c.find("customer", row["id"], CLERK), "name", "credit")
    manager = pick(await c.find("customer", row["id"], MANAGER), "name", "credit")
    return clerk, manager


async def row_scope_find(c: Client, tag: str) -> Any:
    bobs = await created(c, "order", {"number": f"{tag}-b", "buyer": "bob"})
    return await c.find("order", bobs["id"], CLERK), pick(await c.find("order", bobs["id"], BOB), "number")


async def row_scope_list(c: Client, tag: str) -> Any:
    await created(c, "order", {"number": f"{tag}-c", "buyer": "carl"})
    await created(c, "order", {"number": f"{tag}-b", "buyer": "bob"})
    return pick(await c.list("order", f"number[like]={tag}%25", CLERK), "number")


async def list_pages(c: Client, tag: str) -> Any:
    for i in range(5):
        await created(c, "customer", {"name": f"{tag}-{i}"})
    return pick(await c.list("customer", f"name[like]={tag}%25&limit=2&sort=name", ADMIN), "name")


async def update_and_stale_version(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-u"})
    first = pick(await c.update("customer", row["id"], {"visits": 7}, ADMIN, version=1), "visits", "version")
    stale = await c.update("customer", row["id"], {"visits": 8}, ADMIN, version=1)
    return first, stale


async def lifecycle_submitted_is_final(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-s", "buyer": "meg"}, MANAGER, submit=True)
    update = await c.update("order", row["id"], {"amount": "3.00"}, MANAGER)
    delete = await c.delete("order", row["id"], MANAGER)
    return pick(("ok", row), "docstatus"), update, delete


async def submit_needs_its_permission(c: Client, tag: str) -> Any:
    return await c.create("order", {"number": f"{tag}-x", "buyer": "carl"}, CLERK, submit=True)


async def delete_draft(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-d", "buyer": "meg"}, MANAGER)
    return (await c.delete("order", row["id"], MANAGER))[0], (await c.find("order", row["id"], MANAGER))[0]


async def idempotency_replays(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"  # noqa: RUF100
    first = await c.create("customer", {"name": f"{tag}-i"}, ADMIN, key=key)
    again = await c.create("customer", {"name": f"{tag}-i"}, ADMIN, key=key)
    other = await c.create("customer", {"name": f"{tag}-other"}, ADMIN, key=key)
    same = first[1]["id"] == again[1]["id"] if first[0] == again[0] == "ok" else None
    return pick(first, "name"), pick(again, "name"), same, other[0]


async def lifecycle_moves_as_actions(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-m", "buyer": "carl"}, MANAGER)
    refused = await c.act("order", row["id"], "submit", CLERK)  # submit needs sales.order.submit
    submitted = pick(await c.act("order", row["id"], "submit", MANAGER), "docstatus", "version")
    again = await c.act("order", row["id"], "submit", MANAGER)
    cancelled = pick(await c.act("order", row["id"], "cancel", MANAGER), "docstatus")
    return refused[0], submitted, again[0], cancelled


# --- actions: custom, job (``call: async``) and service actions ------------------------------


def acted(outcome: Outcome, *keys: str) -> Outcome:
    """An action's outcome: the named ``result`` values (the echo handler's params and caller) and
    ``name`` of the record, or the job's ``state``/``action``/``target`` when one was queued."""
    code, data = outcome
    if code != "ok" or data is None:
        return code, None
    if "job" in data:
        job = data["job"]
        return code, {"job": {k: str(job.get(k)) for k in ("state", "action", "target")}}
    result = data.get("result") or {}
    seen = {k: str((result.get("params") or {}).get(k)) for k in keys}
    seen["user"] = str(result.get("user"))
    if data.get("data") is not None:
        seen["name"] = str(data["data"].get("name"))
    return code, seen


async def finished_job(c: Client, target: str, job_id: str, who: str) -> Outcome:
    """The job once it succeeded or failed (read through the protocol's own job lookup)."""
    for _ in range(200):
        code, job = await c.job(target, job_id, who)
        if code != "ok" or job["state"] in ("succeeded", "failed"):
            return code, job
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def job_id(outcome: Outcome) -> str:
    code, data = outcome
    assert code == "ok" and "job" in data, outcome
    return str(data["job"]["id"])


async def custom_action_runs(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-a"})
    return acted(
        await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag, "times": 2}),
        "text",
        "times",
    )


async def custom_action_permission(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-p"})
    return await c.action("customer", row["id"], "bump", CLERK, params={"text": tag})


async def custom_action_validation(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-v"})
    missing = await c.action("customer", row["id"], "bump", MANAGER, params={"times": 1})
    wrong = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag, "times": "many"})
    unknown = await c.action("customer", str(uuid.uuid4()), "bump", MANAGER, params={"text": tag})
    return missing, wrong, unknown


async def custom_action_idempotency(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-k"})
    key = f"{c.name}-{tag}"
    first = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag}, key=key)
    again = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag}, key=key)
    other = await c.action("customer", row["id"], "bump", MANAGER, params={"text": "other"}, key=key)
    return acted(first, "text"), first == again, other[0]


async def job_action_runs(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-j"})
    queued = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag})
    code, job = await finished_job(c, "customer", job_id(queued), MANAGER)
    result = (job or {}).get("result") or {}
    done = (
        code,
        job["state"],
        result.get("result", {}).get("params", {}).get("text"),
        job["record_id"] == row["id"],
    )
    return acted(queued)[0], acted(queued)[1]["job"]["action"], done


async def job_action_refusals(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-r"})
    forbidden = await c.action("customer", row["id"], "recount", CLERK, params={"text": tag})
    invalid = await c.action("customer", row["id"], "recount", MANAGER, params={})
    missing = await c.action("customer", str(uuid.uuid4()), "recount", MANAGER, params={"text": tag})
    return forbidden, invalid, missing


async def job_idempotency_and_owner(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-o"})
    key = f"{c.name}-{tag}"
    first = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag}, key=key)
    again = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag}, key=key)
    other = await c.action("customer", row["id"], "recount", MANAGER, params={"text": "x"}, key=key)
    job = job_id(first)
    same = job == job_id(again)
    await finished_job(c, "customer", job, MANAGER)
    return same, other[0], (await c.job("customer", job, BOB))[0], (await c.job("tools", job, MANAGER))[0]


async def service_action_runs(c: Client, tag: str) -> Any:
    return acted(await c.service("quote", MANAGER, params={"text": tag, "times": 3}), "text", "times")


async def service_action_refusals(c: Client, tag: str) -> Any:
    forbidden = await c.service("quote", CLERK, params={"text": tag})
    anonymous = await c.service("quote", None, params={"text": tag})
    invalid = await c.service("quote", MANAGER, params={"times": "x"})
    return forbidden, anonymous[0].startswith("SVC.AUTH."), invalid


async def service_idempotency(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"
    first = await c.service("quote", MANAGER, params={"text": tag}, key=key)
    again = await c.service("quote", MANAGER, params={"text": tag}, key=key)
    other = await c.service("quote", MANAGER, params={"text": "other"}, key=key)
    return acted(first, "text"), first == again, other[0]


async def service_job_runs(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"
    queued = await c.service("batch", CLERK, params={"text": tag}, key=key)
    again = await c.service("batch", CLERK, params={"text": tag}, key=key)
    code, job = await finished_job(c, "tools", job_id(queued), CLERK)
    result = (job or {}).get("result") or {}
    return (
        acted(queued),
        job_id(queued) == job_id(again),
        (code, job["state"], result.get("result", {}).get("params", {}).get("text"), job.get("record_id")),
        (await c.job("tools", job_id(queued), MANAGER))[0],
    )


async def service_job_callback_refused(c: Client, tag: str) -> Any:
    """A callback URL (the action's ``callback.header``) is checked before a job exists: loopback
    is refused without ``--callback-allow``."""
    return await c.service("batch", CLERK, params={"text": tag}, callback="http://127.0.0.1:9/hook")


async def service_rate_limit(c: Client, tag: str) -> Any:
    caller = bearer(f"{tag}-limited")  # a budget of its own per run
    return [(await c.service("limited", caller))[0] for _ in range(3)]


CASES: dict[str, tuple[Case, Any]] = {
    # name: (case, the outcome both protocols must give; ... where the value is checked otherwise)
    "create_and_read_back": (
        create_and_read_back,
        (
            "ok",
            {
                "name": ...,
                "credit": "12.50",
                "visits": "3",
                "vip": "True",
                "tags": "['a', 'b']",
                "version": "1",
            },
        ),
    ),
    "validation_missing_required": (validation_missing_required, ("SVC.VALIDATE.INVALID", None)),
    "validation_wrong_type": (validation_wrong_type, ...),
    "permission_refused": (permission_refused, ...),
    "no_token": (no_token, ...),
    "unknown_record": (unknown_record, ("SVC.RECORD.NOT_FOUND", None)),
    "malformed_id": (malformed_id, ("SVC.RECORD.NOT_FOUND", None)),
    "field_permission_hides": (field_permission_hides, ...),
    "row_scope_find": (row_scope_find, ...),
    "row_scope_list": (row_scope_list, ...),
    "list_pages": (list_pages, ...),
    "update_and_stale_version": (update_and_stale_version, ...),
    "lifecycle_submitted_is_final": (lifecycle_submitted_is_final, ...),
    "submit_needs_its_permission": (submit_needs_its_permission, ...),
    "delete_draft": (delete_draft, ("ok", "SVC.RECORD.NOT_FOUND")),
    "idempotency_replays": (idempotency_replays, ...),
    "lifecycle_moves_as_actions": (
        lifecycle_moves_as_actions,
        (
            "SVC.AUTH.FORBIDDEN",
            ("ok", {"docstatus": "submitted", "version": "2"}),
            "SVC.DOC.ALREADY_SUBMITTED",
            ("ok", {"docstatus": "cancelled"}),
        ),
    ),
    "custom_action_runs": (
        custom_action_runs,
        ("ok", {"text": "TAG", "times": "2", "user": "meg", "name": "TAG-a"}),
    ),
    "custom_action_permission": (custom_action_permission, ("SVC.AUTH.FORBIDDEN", None)),
    "custom_action_validation": (
        custom_action_validation,
        (
            ("SVC.ACTION.PARAMS_INVALID", None),
            ("SVC.ACTION.PARAMS_INVALID", None),
            ("SVC.RECORD.NOT_FOUND", None),
        ),
    ),
    "custom_action_idempotency": (
        custom_action_idempotency,
        (("ok", {"text": "TAG", "user": "meg", "name": "TAG-k"}), True, "SVC.IDEMPOTENCY.KEY_REUSED"),
    ),
    "job_action_runs": (
        job_action_runs,
        ("ok", "recount", ("ok", "succeeded", "TAG", True)),
    ),
    "job_action_refusals": (
        job_action_refusals,
        (("SVC.AUTH.FORBIDDEN", None), ("SVC.ACTION.PARAMS_INVALID", None), ("SVC.RECORD.NOT_FOUND", None)),
    ),
    "job_idempotency_and_owner": (
        job_idempotency_and_owner,
        (True, "SVC.IDEMPOTENCY.KEY_REUSED", "SVC.JOB.NOT_FOUND", "SVC.JOB.NOT_FOUND"),
    ),
    "service_action_runs": (service_action_runs, ("ok", {"text": "TAG", "times": "3", "user": "meg"})),
    "service_action_refusals": (
        service_action_refusals,
        (("SVC.AUTH.FORBIDDEN", None), True, ("SVC.ACTION.PARAMS_INVALID", None)),
    ),
    "service_idempotency": (
        service_idempotency,
        (("ok", {"text": "TAG", "user": "meg"}), True, "SVC.IDEMPOTENCY.KEY_REUSED"),
    ),
    "service_job_callback_refused": (service_job_callback_refused, ("SVC.JOB.CALLBACK_REFUSED", None)),
    "service_rate_limit": (service_rate_limit, ["ok", "ok", "SVC.RATE.LIMITED"]),
    "service_job_runs": (
        service_job_runs,
        (
            ("ok", {"job": {"state": "queued", "action": "batch", "target": "sales/tools"}}),
            True,
            ("ok", "succeeded", "TAG", None),
            "SVC.JOB.NOT_FOUND",
        ),
    ),
}


def _matches(outcome: Any, expected: Any) -> bool:
    if expected is ...:
        return True
    if isinstance(expected, dict):
        return isinstance(outcome, dict) and all(v is ... or outcome.get(k) == v for k, v in expected.items())
    if isinstance(expected, tuple):
        return (
            isinstance(outcome, tuple)
            and len(outcome) == len(expected)
            and all(_matches(o, e) for o, e in zip(outcome, expected, strict=True))
        )
    return bool(outcome == expected)


def _strip_tag(value: Any, tags: tuple[str, str]) -> Any:
    """The outcome with each run's tag replaced, so that the two runs compare."""
    if isinstance(value, str):
        for t in tags:
            value = value.replace(t, "TAG")
        return value
    if isinstance(value, tuple | list):
        return type(value)(_strip_tag(v, tags) for v in value)
    if isinstance(value, dict):
        return {k: _strip_tag(v, tags) for k, v in value.items()}
    return value


@pytest.mark.parametrize("name", sorted(CASES))
async def test_rest_grpc_and_ws_give_the_same_outcome(both: Both, name: str) -> None:
    case, expected = CASES[name]
    tags = (uuid.uuid4().hex[:8], uuid.uuid4().hex[:8], uuid.uuid4().hex[:8])
    rest = _strip_tag(await case(both.rest, tags[0]), tags)
    rpc = _strip_tag(await case(both.rpc, tags[1]), tags)
    ws = _strip_tag(await case(both.ws, tags[2]), tags)
    assert rest == rpc, f"REST {rest!r} != gRPC {rpc!r}"
    assert rest == ws, f"REST {rest!r} != ws {ws!r}"
    assert _matches(rest, expected), rest


async def test_the_cases_pin_what_matters(both: Both) -> None:
    """The ``...`` expectations above, spelled out once over gRPC."""
    tag = uuid.uuid4().hex[:8]
    c = both.rpc
    assert (await permission_refused(c, tag))[0].startswith("SVC.")
    assert (await no_token(c, tag))[0].startswith("SVC.AUTH")
    clerk, manager = await field_permission_hides(c, tag)
    assert clerk[1]["credit"] == "None" and manager[1]["credit"] == "5.00"
    hidden, bobs = await row_scope_find(c, tag)
    assert hidden[0] == "SVC.AUTH.ROW_SCOPE" and bobs[0] == "ok"
    assert await row_scope_list(c, tag) == ("ok", [(f"{tag}-c",)])
    assert len((await list_pages(c, f"{tag}p"))[1]) == 5  # pages of 2 streamed to the end
    first, stale = await update_and_stale_version(c, tag)
    assert first == ("ok", {"visits": "7", "version": "2"}) and stale[0].startswith("SVC.")
    submitted, update, delete = await lifecycle_submitted_is_final(c, tag)
    assert submitted == ("ok", {"docstatus": "submitted"})
    assert update[0] == "SVC.DOC.UPDATE_NOT_DRAFT" and delete[0].startswith("SVC.DOC.")
    first_i, again, same, other = await idempotency_replays(c, tag)
    assert first_i == again and same is True and other.startswith("SVC.IDEMPOTENCY")


async def test_an_entity_without_grpc_has_no_service(both: Both) -> None:
    pool = both.rpc.pool
    names = {
        s.full_name for f in [pool.FindFileByName("acme/sales/v1.proto")] for s in f.services_by_name.values()
    }
    assert names == {
        *(f"{PACKAGE}.CustomerService", f"{PACKAGE}.OrderService", f"{PACKAGE}.TicketService"),
        f"{PACKAGE}.ToolsService",  # the Service manifest's actions
    }
    order = pool.FindServiceByName(f"{PACKAGE}.OrderService")
    assert sorted(m.name for m in order.methods) == [
        *("Cancel", "Create", "Delete", "Get", "List", "Submit", "Update", "Watch")
    ]
    ticket = pool.FindServiceByName(f"{PACKAGE}.TicketService")
    assert sorted(m.name for m in ticket.methods) == ["Create", "Get", "Watch"]  # expose: [find, create]
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await both.rpc.channel.unary_unary(f"/{PACKAGE}.MemoService/Get")(
            b"", metadata=both.rpc.metadata(ADMIN)
        )
    assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_reflection_lists_and_describes_the_services(both: Both) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(both.rpc.channel)

    async def ask(**request: Any) -> Any:
        async for answer in stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(**request)])
        ):
            return answer
        raise AssertionError("no answer")

    listed = await ask(list_services="")
    names = {s.name for s in listed.list_services_response.service}
    assert {f"{PACKAGE}.OrderService", f"{PACKAGE}.CustomerService"} <= names
    assert f"{PACKAGE}.MemoService" not in names
    described = await ask(file_containing_symbol=f"{PACKAGE}.OrderService")
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    order = next(m for f in files for m in f.message_type if m.name == "Order")
    assert [f.name for f in order.field][:2] == ["id", "version"]
    assert "number" in [f.name for f in order.field]


async def test_schema_proto_prints_the_services(tmp_path: Any) -> None:
    for name, text in SPEC.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = CliRunner().invoke(server_cli.schema, ["--proto", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"package {PACKAGE};" in result.output
    assert "service OrderService {" in result.output
    assert (
        "rpc List(acme.sales.v1.ListOrderRequest) returns (stream acme.sales.v1.ListOrderPage);"
        in result.output
    )
    assert "MemoService" not in result.output
    assert "optional string number = 16;" in result.output
    assert descriptors.proto_text([]) == ""


async def test_watch_resumes_after_a_seq_then_streams_live_events(both: Both) -> None:
    c = both.rpc
    row = await created(c, "customer", {"name": "watched", "credit": "9.00"})
    watch = c._method("customer", "Watch", streaming=True)
    request = c.request("customer", "Watch", record=row["id"], after=0)
    events = watch(request, metadata=c.metadata(CLERK))  # the clerk may not read credit

    first = await asyncio.wait_for(events.read(), 30)
    assert first.event == "created" and first.record.name == "watched" and first.record_id == row["id"]
    assert not first.record.HasField("credit")  # field permissions, as the websocket's
    assert first.seq > 0
    assert (await c.update("customer", row["id"], {"visits": 4}, ADMIN))[0] == "ok"
    live = await asyncio.wait_for(events.read(), 30)
    assert live.event == "updated" and live.record.visits == 4 and live.seq > first.seq
    events.cancel()

    resumed = watch(
        c.request("customer", "Watch", record=row["id"], after=first.seq), metadata=c.metadata(ADMIN)
    )
    again = await asyncio.wait_for(resumed.read(), 30)
    assert again.seq == live.seq and again.record.credit == "9.00"  # no repeat, no gap
    resumed.cancel()


async def test_watch_refuses_a_caller_without_a_token(both: Both) -> None:
    c = both.rpc
    stream = c._method("customer", "Watch", streaming=True)(
        c.request("customer", "Watch"), metadata=[("dap-workspace", "default")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.read()
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_ws_calls_are_refused_for_an_entity_without_ws(both: Both) -> None:
    assert await both.ws._call(ADMIN, entity="sales/memo", verb="find", record=str(uuid.uuid4())) == (
        "SVC.ENTITY.NOT_FOUND",
        None,
    )
    assert (await both.ws._call(ADMIN, entity="sales/customer", verb="purge"))[0] == "SVC.ACTION.NOT_EXPOSED"


async def test_each_action_is_served_only_where_its_expose_says(both: Both) -> None:
    rest, rpc, ws = both.rest, both.rpc, both.ws
    row = await created(rest, "customer", {"name": "exposed"})
    rid = row["id"]
    # REST: rest_only runs, wire_only (expose: [grpc, ws]) is not there
    assert (await rest.action("customer", rid, "rest_only", ADMIN))[0] == "ok"
    assert (await rest.action("customer", rid, "wire_only", ADMIN))[0] == "SVC.ACTION.NOT_FOUND"
    assert (await rest.service("rest_only", ADMIN))[0] == "ok"
    assert (await rest.service("wire_only", ADMIN))[0] == "SVC.ACTION.NOT_FOUND"
    # gRPC: no method for what leaves grpc out (UNIMPLEMENTED, absent from the schema)
    customer = rpc.pool.FindServiceByName(f"{PACKAGE}.CustomerService")
    assert sorted(m.name for m in customer.methods) == [
        *("Bump", "Create", "Delete", "Get", "GetJob", "List", "Recount", "Update", "Watch", "WireOnly")
    ]
    assert customer.methods_by_name["Recount"].output_type.full_name == "dap.jobs.v1.Job"
    assert customer.methods_by_name["Bump"].output_type.full_name == f"{PACKAGE}.CustomerActionResult"
    tools = rpc.pool.FindServiceByName(f"{PACKAGE}.ToolsService")
    assert sorted(m.name for m in tools.methods) == [
        "Batch",
        "GetJob",
        "Hello",
        "Limited",
        "Quote",
        "WireOnly",
    ]
    assert (await rpc.action("customer", rid, "wire_only", ADMIN))[0] == "ok"
    assert (await rpc.service("wire_only", ADMIN))[0] == "ok"
    for path in (f"/{PACKAGE}.CustomerService/RestOnly", f"/{PACKAGE}.ToolsService/RestOnly"):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await rpc.channel.unary_unary(path)(b"", metadata=rpc.metadata(ADMIN))
        assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    # ws: refused with REST's code
    assert (await ws.action("customer", rid, "wire_only", ADMIN))[0] == "ok"
    assert (await ws.action("customer", rid, "rest_only", ADMIN))[0] == "SVC.ACTION.NOT_FOUND"
    assert (await ws.service("wire_only", ADMIN))[0] == "ok"
    for action in ("rest_only", "hello"):  # hello: expose [rest, grpc]
        assert (await ws.service(action, ADMIN))[0] == "SVC.ACTION.NOT_FOUND"
    assert (await ws._call(ADMIN, service="sales/memo", verb="x"))[0] == "SVC.ENTITY.NOT_FOUND"


async def test_a_public_service_action_takes_an_anonymous_caller(both: Both) -> None:
    for c in (both.rest, both.rpc):
        code, answer = await c.service("hello", None)
        assert code == "ok" and answer["result"]["user"] == "", (c.name, answer)  # anonymous
        code, answer = await c.service("hello", CLERK)  # a token sent is verified and used
        assert code == "ok" and answer["result"]["user"] == "carl", (c.name, answer)


async def test_an_idempotency_key_replays_across_protocols(both: Both) -> None:
    rest, rpc, ws = both.rest, both.rpc, both.ws
    key = uuid.uuid4().hex
    first = await rest.service("quote", MANAGER, params={"text": "once"}, key=key)
    assert first[0] == "ok"
    assert await rpc.service("quote", MANAGER, params={"text": "once"}, key=key) == first
    assert await ws.service("quote", MANAGER, params={"text": "once"}, key=key) == first
    assert (await ws.service("quote", MANAGER, params={"text": "twice"}, key=key))[0] == (
        "SVC.IDEMPOTENCY.KEY_REUSED"
    )
    row = await created(rest, "customer", {"name": "keyed"})
    key = uuid.uuid4().hex
    queued = job_id(
        await rpc.action("customer", row["id"], "recount", MANAGER, params={"text": "t"}, key=key)
    )
    again = await rest.action("customer", row["id"], "recount", MANAGER, params={"text": "t"}, key=key)
    assert job_id(again) == queued  # one job, whichever protocol repeats the call
    for c in (rest, rpc, ws):  # and each protocol reads it alike
        code, job = await finished_job(c, "customer", queued, MANAGER)
        assert (
            code == "ok"
            and job["state"] == "succeeded"
            and job["result"]["result"]["params"] == {"text": "t"}
        )


async def test_job_params_keep_exact_numbers() -> None:
    from decimal import Decimal

    from dap.server.workflows import acting, jobs

    text = acting.json_text({"a": Decimal("12.50"), "b": [1, Decimal("0.1"), None], "c": "x"})
    assert text == '{"a":12.50,"b":[1,0.1,null],"c":"x"}'
    assert jobs.decode(text) == {"a": Decimal("12.50"), "b": [1, Decimal("0.1"), None], "c": "x"}


async def test_the_rate_limit_address_of_a_grpc_caller_has_no_port() -> None:
    from dap.server.rpc.services import peer_ip

    class Peer:
        def __init__(self, peer: str) -> None:
            self._peer = peer

        def peer(self) -> str:
            return self._peer

    assert peer_ip(Peer("ipv4:127.0.0.1:50123")) == "127.0.0.1"  # type: ignore[arg-type]
    assert peer_ip(Peer("ipv6:[::1]:50123")) == "::1"  # type: ignore[arg-type]
    assert peer_ip(Peer("unix:/tmp/s")) == "unix:/tmp/s"  # type: ignore[arg-type]


EXTRA = """
apiVersion: dap.io/v1
kind: Service
metadata: {name: extra, module: sales}
spec:
  expose: [{type: grpc}]
  actions:
    - {name: ping, impl: {type: native, handler: ops-test-echo}}
"""


async def test_the_grpc_services_follow_a_catalog_swap(both: Both) -> None:
    """A catalog swapped in (the resource pod's new artifact) is served without a restart: a service
    it adds answers and is reflected, an entity it no longer exposes has no service."""
    app = both.rest.srv.server.app
    rpc = app[rpc_server.RPC]
    swapped = {k: v for k, v in SPEC.items() if k != "sales/ticket.yaml"} | {"sales/extra.yaml": EXTRA}
    previous = app[state.SPEC].swap(load(swapped))
    try:
        assert f"{PACKAGE}.ExtraService" in rpc.services and f"{PACKAGE}.TicketService" not in rpc.services
        stub = reflection_pb2_grpc.ServerReflectionStub(both.rpc.channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for answer in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in answer.list_services_response.service}
            break
        assert f"{PACKAGE}.ExtraService" in names and f"{PACKAGE}.TicketService" not in names
        client = Grpc(both.rpc.channel, rpc.pool)
        code, answer = await client._unary(
            "extra", "Ping", client.request("extra", "Ping"), client.metadata(CLERK)
        )
        assert code == "ok" and answer["result"]["user"] == "carl", answer
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await both.rpc.channel.unary_unary(f"/{PACKAGE}.TicketService/Get")(
                b"", metadata=client.metadata(ADMIN)
            )
        assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        app[state.SPEC].swap(previous)
    assert f"{PACKAGE}.TicketService" in rpc.services and f"{PACKAGE}.ExtraService" not in rpc.services
