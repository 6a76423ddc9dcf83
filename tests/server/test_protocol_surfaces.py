"""What the protocol table does not cover: gRPC's own surface (services per ``expose``, reflection,
``dap schema --proto``, Watch), each action's ``expose`` per protocol, idempotency keys and jobs
shared across protocols, and the gRPC schema following a catalog swap."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dap.server import cli as server_cli
from dap.server import state
from dap.server.rpc import descriptors
from dap.server.rpc import server as rpc_server

from .conftest import load
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
