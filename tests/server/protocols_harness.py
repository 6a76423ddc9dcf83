"""What the protocol tests share: one server answering REST, gRPC and the websocket on the spec of
``protocols_spec``, a client per protocol, the callers' tokens, and helpers over outcomes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
import pytest_asyncio

from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import Running, load, serve_options
from .protocols_clients import Grpc, Rest, Ws
from .protocols_spec import SPEC, Outcome, bearer
from .services_spec import install_handlers

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


async def created(
    c: Client, entity: str, body: dict[str, Any], who: str = ADMIN, **kw: Any
) -> dict[str, Any]:
    code, data = await c.create(entity, body, who, **kw)
    assert code == "ok", (c.name, code)
    return dict(data)


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
