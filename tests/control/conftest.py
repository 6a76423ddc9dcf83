"""Fixtures of the control-plane tests: fresh databases, real servers on loopback, manifests."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from dap import embedded
from dap.control.serving import app as control_app
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.trust import signing
from tests.conftest import create_database, drop_database, fresh_database

MODULE = b"apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: buying}\nspec: {title: Buying}\n"
ENTITY = (
    b"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: supplier, module: buying}\n"
    b"spec: {fields: [{name: title, type: string}]}\n"
)


def manifests(**extra: bytes) -> dict[str, bytes]:
    """A small valid manifest set plus ``extra`` files (path -> bytes)."""
    return {"buying/module.yaml": MODULE, "buying/supplier.yaml": ENTITY, **extra}


def workspace_manifest(name: str, **spec: str) -> bytes:
    fields = ", ".join(f"{k}: {v}" for k, v in {"title": name.title(), **spec}.items())
    return (
        f"apiVersion: dap.io/v1\nkind: Workspace\nmetadata: {{name: {name}}}\nspec: {{{fields}}}\n".encode()
    )


def json_upload(app: str, files: dict[str, bytes], workspaces: list[str] | None = None) -> dict[str, Any]:
    return {
        "app": app,
        "workspaces": workspaces or [],
        "files": [{"path": p, "content": base64.b64encode(c).decode()} for p, c in files.items()],
    }


MakeDsn = Callable[[], Awaitable[str]]


@pytest.fixture
async def make_dsn(pg_server_dsn: str) -> AsyncIterator[MakeDsn]:
    """Async factory of fresh, empty databases (dropped after the test)."""
    created: list[str] = []

    async def make() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        await create_database(pg_server_dsn, name)
        created.append(name)
        return embedded.dsn_for_database(pg_server_dsn, name)

    yield make
    for name in created:
        await drop_database(pg_server_dsn, name)


@pytest.fixture
def db_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A fresh database for this test (the default store of ``start_control``)."""
    name, dsn = fresh_database(pg_server_dsn)
    yield dsn
    asyncio.run(drop_database(pg_server_dsn, name))


@dataclass
class Running:
    url: str
    app: web.Application
    runner: web.AppRunner
    port: int
    stopped: bool = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.runner.cleanup()


@asynccontextmanager
async def serving(app: web.Application, port: int = 0) -> AsyncIterator[Running]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    running = Running(f"http://127.0.0.1:{bound}", app, runner, bound)
    try:
        yield running
    finally:
        await runner.cleanup()


Start = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start_control(db_dsn: str) -> AsyncIterator[Start]:
    """Start a control process (its own pool) on loopback; everything stops after the test."""
    pools: list[store.Pool] = []
    runners: list[Running] = []

    async def start(
        *,
        dsn: str = db_dsn,
        signer: signing.Signer | None = None,
        port: int = 0,
        **options: Any,
    ) -> Running:
        config = settings.Settings(**{"mode": "standalone", **options})
        if signer is None and config.mode != "cluster":
            signer = signing.Signer.generate()
        pool = await store.connect(dsn, min_size=1, max_size=4)
        pools.append(pool)
        app = control_app.build_app(config=config, pool=pool, signer=signer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        bound = runner.addresses[0][1]
        running = Running(f"http://127.0.0.1:{bound}", app, runner, bound)
        runners.append(running)
        return running

    yield start
    for running in runners:
        await running.stop()
    for pool in pools:
        await pool.close()


@pytest.fixture(name="http")
async def http_fixture() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def http_session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
