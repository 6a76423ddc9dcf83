"""Child-process mode: the bridge starts the example app (Python and Node), restarts it when it
dies, and stops it with the server."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from pathlib import Path

import aiohttp
import pytest

from dap.bridge import hosting, runtimes
from dap.server.web import app
from tests.server.conftest import serve_options, token

from .conftest import JSON, catalog
from .test_examples import EXAMPLES


def test_backoff_doubles_and_resets() -> None:
    assert runtimes.next_backoff(0.5, 1) == 1.0
    assert runtimes.next_backoff(20, 1) == runtimes.MAX_BACKOFF
    assert runtimes.next_backoff(20, 61) == runtimes.FIRST_BACKOFF


def test_bad_runtimes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="python, node or php"):
        runtimes.command("ruby", tmp_path, None)
    with pytest.raises(ValueError, match="does not exist"):
        runtimes.command("python", tmp_path, None)


@pytest.mark.parametrize(
    "runtime",
    [
        pytest.param("python", id="python"),
        pytest.param(
            "node:20", id="node", marks=pytest.mark.skipif(shutil.which("node") is None, reason="no node")
        ),
    ],
)
async def test_the_bridge_runs_restarts_and_stops_the_app(pg_dsn: str, runtime: str) -> None:
    folder = "python" if runtime == "python" else "node"
    with tempfile.TemporaryDirectory(prefix="dap-rt-") as tmp:
        opts = serve_options(
            pg_dsn, spec=str(EXAMPLES / "spec"), runtime=runtime, app_dir=str(EXAMPLES / folder)
        )
        server = await app.create_server(opts, catalog(EXAMPLES / "spec"))
        bridge = hosting.attach(server.app, opts, state_dir=Path(tmp), ping_interval=0.2)
        assert bridge is not None and bridge.child is not None
        await server.start()
        try:
            headers = {"Authorization": f"Bearer {token()}", **JSON}
            base = f"{server.urls['api']}/default/api/store"
            async with aiohttp.ClientSession(headers=headers) as http:

                async def reserve() -> tuple[int, object]:
                    async with http.post(f"{base}/item", json={"sku": "x", "stock": 5}) as r:
                        it = (await r.json())["data"]
                    async with http.post(f"{base}/order", json={"item": it["id"], "qty": 2}) as r:
                        o = (await r.json())["data"]
                    async with http.post(f"{base}/order/{o['id']}/reserve") as r:
                        return r.status, await r.json()

                status, answer = await reserve()
                assert status == 200, answer
                first = bridge.child.proc
                assert first is not None
                os.kill(first.pid, signal.SIGKILL)
                for _ in range(200):
                    proc = bridge.child.proc
                    if proc is not first and proc is not None and bridge.child.app_socket.exists():
                        break
                    await asyncio.sleep(0.05)
                assert bridge.child.starts == 2
                for _ in range(100):  # the new child opens its socket
                    status, answer = await reserve()
                    if status == 200:
                        break
                    await asyncio.sleep(0.05)
                assert status == 200, answer
                last = bridge.child.proc
        finally:
            await server.stop()
        assert last is not None and last.returncode is not None  # stopped with the server
