"""Fixtures of the bridge tests: a real app process (a subprocess on a unix socket) and a real
server with the bridge attached, on the embedded Postgres, talking real HTTP on loopback."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from dap import config
from dap.bridge import hosting
from dap.server.catalog import Catalog
from dap.server.web import app
from tests.server.conftest import Running, serve_options

HERE = Path(__file__).parent
SPEC = HERE / "spec"
JSON = {"Content-Type": "application/json"}


class AppProcess:
    """``tests/bridge/app.py`` as a child process listening on a unix socket."""

    def __init__(self, directory: Path, command: list[str] | None = None) -> None:
        self.socket = directory / "app.sock"
        self.command = command or [sys.executable, str(HERE / "app.py")]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        self.proc = subprocess.Popen([*self.command, self.endpoint])
        for _ in range(200):
            if self.socket.exists():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the test app exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("the test app did not open its socket in 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def ensure(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.start()


@pytest.fixture(scope="module")
def app_process() -> Iterator[AppProcess]:
    with tempfile.TemporaryDirectory(prefix="dap-app-") as tmp:
        process = AppProcess(Path(tmp))
        process.start()
        try:
            yield process
        finally:
            process.stop()


@dataclass
class Bridged(Running):
    bridge: hosting.Bridge
    app_process: AppProcess

    async def call(self, method: str, path: str, body: Any = None, ws: str = "default") -> tuple[int, Any]:
        headers = {**self.auth(), **JSON}
        url = f"{self.api}/{ws}/api/store/{path}"
        async with self.http.request(method, url, json=body, headers=headers) as resp:
            return resp.status, (await resp.json() if resp.status != 204 else None)

    async def ctx(self, primitive: str, op: str, body: Any, **headers: str) -> tuple[int, Any]:
        async with self.http.post(
            f"{self.bridge.ctx_url}/ctx/{primitive}/{op}", json=body, headers=headers
        ) as r:
            return r.status, await r.json(content_type=None)

    async def seen(self) -> list[dict[str, str]]:
        connector = aiohttp.UnixConnector(path=str(self.app_process.socket))
        async with aiohttp.ClientSession(connector=connector) as s, s.get("http://app/ids") as r:
            answer: list[dict[str, str]] = await r.json()
            return answer


def catalog(spec: Path = SPEC) -> Catalog:
    return Catalog.from_spec(config.load_spec(spec))


@contextlib.asynccontextmanager
async def bridged(
    dsn: str, process: AppProcess, spec: Path = SPEC, **overrides: Any
) -> AsyncIterator[Bridged]:
    opts = serve_options(dsn, spec=str(spec), sidecar_endpoint=process.endpoint, **overrides)
    server = await app.create_server(opts, catalog(spec))
    with tempfile.TemporaryDirectory(prefix="dap-ds-") as state_dir:
        bridge = hosting.attach(server.app, opts, state_dir=Path(state_dir), ping_interval=0.2)
        assert bridge is not None
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                yield Bridged(server, http, bridge, process)
        finally:
            await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, app_process: AppProcess) -> AsyncIterator[Bridged]:
    async with bridged(pg_dsn, app_process, invoke_timeout="2s", pool_size=12) as b:
        yield b
