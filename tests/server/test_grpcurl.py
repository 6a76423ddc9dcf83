"""grpcurl, knowing nothing but the address, lists, describes and calls the services by reflection.

grpcurl is built by ``tools/grpcurl/build.sh`` (``make grpcurl``: ``go install`` from the Go
module proxy into ~/.cache/dap/grpcurl); without a Go toolchain the tests skip saying so. It runs
as a child process while the server answers on this test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import load, serve_options
from .protocols_spec import PACKAGE, SPEC, bearer
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

BUILD = Path(__file__).resolve().parents[2] / "tools" / "grpcurl" / "build.sh"
ADMIN = bearer("root", "admin")
MANAGER = bearer("meg", "manager")


@pytest.fixture(scope="module")
def grpcurl() -> str:
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == 3:
        pytest.skip(f"grpcurl cannot be built here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("grpcurl-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def address(pg_dsn: str, registered: None) -> AsyncIterator[str]:
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), load(SPEC))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        yield f"127.0.0.1:{rpc.port}"
    finally:
        await server.stop()


async def run(grpcurl: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        grpcurl, "-plaintext", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_grpcurl_lists_the_exposed_services(grpcurl: str, address: str) -> None:
    code, out = await run(grpcurl, address, "list")
    assert code == 0, out
    services = set(out.split())
    assert {f"{PACKAGE}.CustomerService", f"{PACKAGE}.OrderService", f"{PACKAGE}.TicketService"} <= services
    assert f"{PACKAGE}.MemoService" not in services  # memo's expose has no grpc


async def test_grpcurl_describes_a_service_and_its_messages(grpcurl: str, address: str) -> None:
    code, out = await run(grpcurl, address, "describe", f"{PACKAGE}.OrderService")
    assert code == 0, out
    assert f"rpc List ( .{PACKAGE}.ListOrderRequest ) returns ( stream .{PACKAGE}.ListOrderPage );" in out
    assert f"rpc Update ( .{PACKAGE}.UpdateOrderRequest ) returns ( .{PACKAGE}.Order );" in out
    code, out = await run(grpcurl, address, "describe", f"{PACKAGE}.Order")
    assert code == 0, out
    assert "optional string number = 16;" in out and "int64 version = 2;" in out


async def test_grpcurl_calls_with_a_token_and_reads_the_error_code(grpcurl: str, address: str) -> None:
    headers = ["-H", f"authorization: {ADMIN}", "-H", "dap-workspace: default"]
    body = json.dumps({"record": {"name": "grpcurl", "credit": "1.50", "visits": 2}})
    code, out = await run(grpcurl, *headers, "-d", body, address, f"{PACKAGE}.CustomerService/Create")
    assert code == 0, out
    created = json.loads(out)
    assert created["name"] == "grpcurl" and created["credit"] == "1.50" and created["version"] == "1"
    code, out = await run(
        grpcurl, *headers, "-d", json.dumps({"id": created["id"]}), address, f"{PACKAGE}.CustomerService/Get"
    )
    assert code == 0 and json.loads(out)["id"] == created["id"], out
    missing = json.dumps({"id": "00000000-0000-0000-0000-000000000000"})
    code, out = await run(grpcurl, *headers, "-d", missing, address, f"{PACKAGE}.CustomerService/Get")
    assert code != 0 and "NotFound" in out and "SVC.RECORD.NOT_FOUND" in out, out
    anonymous = ["-H", "dap-workspace: default"]  # no token
    code, out = await run(grpcurl, *anonymous, "-d", missing, address, f"{PACKAGE}.CustomerService/Get")
    assert code != 0 and "Unauthenticated" in out, out


async def test_grpcurl_calls_actions_and_reads_their_job(grpcurl: str, address: str) -> None:
    headers = ["-H", f"authorization: {MANAGER}", "-H", "dap-workspace: default"]
    code, out = await run(grpcurl, address, "describe", f"{PACKAGE}.ToolsService")
    assert code == 0 and "rpc Batch" in out and "returns ( .dap.jobs.v1.Job )" in out, out
    quote = json.dumps({"params": {"text": "by reflection", "times": 2}})
    code, out = await run(grpcurl, *headers, "-d", quote, address, f"{PACKAGE}.ToolsService/Quote")
    assert code == 0, out
    assert json.loads(out)["result"]["params"] == {"text": "by reflection", "times": 2}
    code, out = await run(
        grpcurl,
        *headers,
        "-d",
        json.dumps({"record": {"name": "acted"}}),
        address,
        f"{PACKAGE}.CustomerService/Create",
    )
    assert code == 0, out
    record = json.loads(out)["id"]
    recount = json.dumps({"id": record, "params": {"text": "later"}})
    code, out = await run(grpcurl, *headers, "-d", recount, address, f"{PACKAGE}.CustomerService/Recount")
    assert code == 0, out
    job = json.loads(out)
    assert job["state"] == "queued" and job["action"] == "recount" and job["record_id"] == record, job
    for _ in range(100):
        code, out = await run(
            grpcurl,
            *headers,
            "-d",
            json.dumps({"id": job["id"]}),
            address,
            f"{PACKAGE}.CustomerService/GetJob",
        )
        assert code == 0, out
        if json.loads(out)["state"] == "succeeded":
            break
        await asyncio.sleep(0.1)
    assert json.loads(out)["result"]["result"]["params"] == {"text": "later"}, out
    code, out = await run(grpcurl, *headers, "-d", "{}", address, f"{PACKAGE}.CustomerService/Bump")
    assert code != 0 and "SVC.RECORD.NOT_FOUND" in out, out  # no id: no record
