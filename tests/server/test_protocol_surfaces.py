"""What the protocol table does not cover: gRPC's own surface (services per ``expose``, reflection,
``dap schema --proto``, Watch), each action's ``expose`` per protocol, idempotency keys and jobs
shared across protocols, and the gRPC schema following a catalog swap."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import uuid
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from dap.server import cli as server_cli
from dap.server import errors, options, state
from dap.server.rpc import descriptors, status
from dap.server.rpc import server as rpc_server

from .conftest import load, token
from .protocols_clients import Grpc
from .protocols_harness import ADMIN, CLERK, MANAGER, Both, both, created, finished_job, job_id, registered
from .protocols_spec import PACKAGE, SPEC

pytestmark = pytest.mark.asyncio(loop_scope="module")

__all__ = ["both", "registered"]  # fixtures, used by name


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


def _status(exc: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The ``google.rpc.Status`` a failed call carries in its trailing metadata."""
    for key, value in exc.trailing_metadata() or ():
        if key == rpc_status.GRPC_DETAILS_METADATA_KEY:
            return status_pb2.Status.FromString(value)
    raise AssertionError(f"no status details in {exc!r}")


def _detail(found: status_pb2.Status, kind: type[Any]) -> Any:
    out = kind()
    for detail in found.details:
        if detail.Is(out.DESCRIPTOR) and detail.Unpack(out):
            return out
    return None


async def test_an_update_mask_naming_an_unknown_field_is_refused_as_rest_refuses_it(both: Both) -> None:
    rest, c = both.rest, both.rpc
    row = await created(rest, "customer", {"name": "masked"})
    status_, problem, _ = await rest._call("PATCH", f"customer/{row['id']}", ADMIN, {"colour": "red"})
    assert status_ == 422 and problem["code"] == "SVC.VALIDATE.INVALID", problem
    assert [e["path"] for e in problem["errors"]] == ["colour"]

    request = c.request("customer", "Update", id=row["id"], record=c.record("customer", {"visits": 2}))
    request.update_mask.paths.extend(["visits", "colour", "shade"])
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await c._method("customer", "Update")(request, metadata=c.metadata(ADMIN))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    found = _status(raised.value)
    info = _detail(found, error_details_pb2.ErrorInfo)
    assert info.reason == problem["code"] and info.metadata["http_status"] == "422"
    bad = _detail(found, error_details_pb2.BadRequest)
    assert bad is not None, found
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("colour", "unknown field"),
        ("shade", "unknown field"),
    ]
    assert (await rest.find("customer", row["id"], ADMIN))[1]["version"] == 1  # nothing written


@pytest.mark.parametrize(
    ("verb", "streaming"), [("Get", False), ("Update", False), ("List", True)], ids=["get", "update", "list"]
)
async def test_bytes_that_are_no_message_are_an_invalid_argument(
    both: Both, verb: str, streaming: bool
) -> None:
    """Whatever the method, bytes that do not decode as its request answer INVALID_ARGUMENT with a
    message saying what to send, never a Python class name."""
    c = both.rpc
    path = f"/{PACKAGE}.CustomerService/{verb}"

    async def send(raw: bytes) -> None:  # no serializer: the bytes go out as they are
        if streaming:
            await c.channel.unary_stream(path)(raw, metadata=c.metadata(ADMIN)).read()
        else:
            await c.channel.unary_unary(path)(raw, metadata=c.metadata(ADMIN))

    for garbage in (b"\xff", b"\x0a\x05ab", b"\x0a\x03\xff\xfe\xfd"):  # cut varint, short field, bad UTF-8
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await send(garbage)
        exc = raised.value
        assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, (garbage, exc.code(), exc.details())
        details = exc.details() or ""
        assert f"{PACKAGE}.{verb}CustomerRequest" in details, details
        assert "class" not in details and "DecodeError" not in details, details
        assert status.reason(exc.trailing_metadata()) == "SVC.REQUEST.MALFORMED"


async def _ws_call(both: Both, cid: Any, **frame: Any) -> dict[str, Any]:
    """The answer to one ``call`` frame sent with ``cid`` as its id (the raw JSON frame)."""
    async with both.ws.srv.http.ws_connect(
        f"{both.ws.srv.api}/default/_ws", headers={"Authorization": ADMIN}
    ) as ws:
        await ws.send_str(json.dumps({"type": "call", "id": cid, **frame}))
        async for msg in ws:
            answer: dict[str, Any] = json.loads(msg.data)
            if answer["type"] != "welcome":
                return answer
    raise AssertionError("the socket closed without an answer")


@pytest.mark.parametrize(
    "cid",
    [{"n": 1, "tags": ["a", None], "ok": True}, 7, 0, 2.5, ["c", 1], "c1"],
    ids=["object", "integer", "zero", "number", "array", "string"],
)
async def test_a_ws_call_is_answered_with_its_id_as_sent(both: Both, cid: Any) -> None:
    row = await created(both.rest, "customer", {"name": "ided"})
    found = await _ws_call(both, cid, entity="sales/customer", verb="find", record=row["id"])
    assert found["type"] == "result" and found["id"] == cid, found
    refused = await _ws_call(both, cid, entity="sales/customer", verb="find", record=str(uuid.uuid4()))
    assert refused["type"] == "error" and refused["id"] == cid, refused


@pytest.mark.parametrize("cid", [None, ""], ids=["null", "empty"])
async def test_a_ws_call_without_an_id_is_refused(both: Both, cid: Any) -> None:
    refused = await _ws_call(both, cid, entity="sales/customer", verb="list")
    assert refused["type"] == "error" and refused["code"] == "SVC.WS.FRAME", refused
    assert refused["id"] == cid


async def test_bytes_that_are_no_reflection_request_are_an_invalid_argument(both: Both) -> None:
    stream = both.rpc.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    call = stream(iter([b"\xff"]))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call.read()
    exc = raised.value
    assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, (exc.code(), exc.details())
    details = exc.details() or ""
    assert "ServerReflectionRequest" in details and "class" not in details, details


async def test_a_grpc_address_in_use_refuses_the_boot_naming_it(both: Both) -> None:
    """Taken by a plain socket or by another gRPC server (grpcio binds with SO_REUSEPORT unless
    told not to, and two servers would then share the port silently), the address is refused."""
    app = both.rest.srv.server.app
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        for port in (taken.getsockname()[1], both.port):
            opts = dataclasses.replace(
                app[state.OPTIONS], grpc_addr=options.parse_address(f"127.0.0.1:{port}")
            )
            second = rpc_server.RpcServer(app, opts)
            with pytest.raises(errors.BootRefused) as refused:
                await second.start()
            assert f"--grpc-addr 127.0.0.1:{port}" in str(refused.value), refused.value
            assert second.server is None


async def test_workspace_confusion_and_guarded_masks_stay_refused(both: Both) -> None:
    """What issue 40's probe found refused, kept so: a token of one workspace is refused in another
    whatever the metadata or the frame says, a workspace's records are not found from another, and
    an ``update_mask`` naming a field the caller may not write is 403 as REST's body is."""
    slug = f"w{uuid.uuid4().hex[:8]}"
    await both.rest.srv.register(slug)
    c, ws = both.rpc, both.ws
    row = await created(c, "customer", {"name": "at-home", "credit": "3.00"})
    theirs = f"Bearer {token(workspace=slug, sub='u-root', username='root')}"
    assert (await c.find("customer", row["id"], theirs))[0] == "SVC.AUTH.WRONG_WORKSPACE"
    request = c.request("customer", "Get", id=row["id"])
    there = [(k, slug if k == "dap-workspace" else v) for k, v in c.metadata(theirs)]
    assert await c._unary("customer", "Get", request, there) == ("SVC.RECORD.NOT_FOUND", None)
    ours = f"Bearer {token(workspace='default', sub='u-root', username='root')}"
    mixed = [(k, slug if k == "dap-workspace" else v) for k, v in c.metadata(ours)]
    assert (await c._unary("customer", "Get", request, mixed))[0] == "SVC.AUTH.WRONG_WORKSPACE"
    # the socket's workspace is its path's: another's token is refused, a frame cannot name another
    assert (await ws._call(theirs, entity="sales/customer", verb="find", record=row["id"]))[0] == (
        "SVC.AUTH.WRONG_WORKSPACE"
    )
    found = await ws._call(ours, entity="sales/customer", verb="find", record=row["id"], workspace=slug)
    assert found[0] == "ok" and found[1]["data"]["name"] == "at-home", found

    for client in (both.rest, c, ws):  # the clerk may update, but not read (so not write) credit
        assert (await client.update("customer", row["id"], {"credit": "9.00"}, CLERK))[0] == (
            "SVC.AUTH.FORBIDDEN"
        ), client.name
    assert (await c.update("customer", row["id"], {"visits": 1}, CLERK))[0] == "ok"
    assert (await c.find("customer", row["id"], ADMIN))[1]["credit"] == "3.00"
