"""grpcurl, knowing nothing but the address, lists, describes and calls the services by reflection.

grpcurl is built by ``tools/grpcurl/build.sh`` (``make grpcurl``: ``go install`` from the Go
module proxy into ~/.cache/dap/grpcurl); without a Go toolchain the tests skip saying so. It runs
as a child process while the server answers on this test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import load, serve_options
from .protocols_spec import PACKAGE, SPEC, bearer

pytestmark = pytest.mark.asyncio(loop_scope="module")

BUILD = Path(__file__).resolve().parents[2] / "tools" / "grpcurl" / "build.sh"
ADMIN = bearer("root", "admin")


@pytest.fixture(scope="module")
def grpcurl() -> str:
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == 3:
        pytest.skip(f"grpcurl cannot be built here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def address(pg_dsn: str) -> AsyncIterator[str]:
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
