"""The example app in both helpers, Python and Node, as a real child process: its ``reserve``
decrements the stock inside the invoke's scope; asking for more than is left rolls it all back."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import AppProcess, bridged

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "bridge"
RUNTIMES = [
    pytest.param([sys.executable, str(EXAMPLES / "python" / "app.py")], id="python"),
    pytest.param(
        ["node", str(EXAMPLES / "node" / "app.js")],
        id="node",
        marks=pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    ),
]


@pytest.mark.parametrize("command", RUNTIMES)
async def test_the_example_reserves_stock_in_one_scope(pg_dsn: str, command: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="dap-example-") as tmp:
        process = AppProcess(Path(tmp), command)
        process.start()
        try:
            async with bridged(pg_dsn, process, spec=EXAMPLES / "spec", invoke_timeout="5s") as srv:
                status, it = await srv.call("POST", "item", {"sku": "bolt", "stock": 5})
                assert status == 201, it
                status, o = await srv.call("POST", "order", {"item": it["data"]["id"], "qty": 3})
                status, answer = await srv.call("POST", f"order/{o['data']['id']}/reserve")
                assert status == 200, answer
                assert answer["result"] == {"stock": 2} and answer["data"]["state"] == "reserved"
                status, o = await srv.call("POST", "order", {"item": it["data"]["id"], "qty": 3})
                status, answer = await srv.call("POST", f"order/{o['data']['id']}/reserve")
                assert status == 500 and "smaller than 3" in answer["detail"], answer
                status, got = await srv.call("GET", f"item/{it['data']['id']}")
                assert got["data"]["stock"] == 2
                status, got = await srv.call("GET", f"order/{o['data']['id']}")
                assert got["data"]["state"] == "new"
        finally:
            process.stop()
