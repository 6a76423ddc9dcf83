"""The saga example (``examples/sagas``, the procurement story): order → reserve the budget in the
app process → notify the supplier. Placed within the budget it completes (one order, one
reservation, one notification); over the budget the reservation is refused and the order is
deleted again (compensated), nothing reserved, nobody notified."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.conftest import AppProcess, bridged
from tests.bridge.test_sagas import free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sagas"


class ExampleApp(AppProcess):
    def __init__(self, directory: Path, port: int) -> None:
        super().__init__(directory)
        self.port = port

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(EXAMPLE / "app.py"), self.endpoint, str(self.port)])
        for _ in range(200):
            if self.socket.exists():
                return
            time.sleep(0.05)
        raise RuntimeError("the example app did not open its socket in 10 s")

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/state", timeout=5) as resp:
            found: dict[str, Any] = json.loads(resp.read())
            return found


async def test_the_procurement_saga_completes_or_compensates(pg_dsn: str, tmp_path: Path) -> None:
    port = free_port()
    spec = tmp_path / "spec"
    shutil.copytree(EXAMPLE / "spec", spec)
    ordering = spec / "buying" / "ordering.yaml"
    ordering.write_text(ordering.read_text().replace("127.0.0.1:8091", f"127.0.0.1:{port}"))
    with tempfile.TemporaryDirectory(prefix="dap-saga-example-") as tmp:
        app = ExampleApp(Path(tmp), port)
        app.start()
        try:
            async with bridged(pg_dsn, app, spec=spec, invoke_timeout="5s") as srv:
                ends = []
                for amount in ("300.00", "20000.00"):
                    url = f"{srv.api}/default/api/buying/ordering/place"
                    body = {"supplier": "ACME", "amount": amount}
                    async with srv.http.post(url, json=body, headers=srv.auth()) as resp:
                        assert resp.status == 202, await resp.text()
                        job = (await resp.json())["data"]
                    path = f"{srv.api}/default/api/buying/ordering/_jobs/{job['id']}"
                    for _ in range(300):
                        async with srv.http.get(path, headers=srv.auth()) as resp:
                            job = (await resp.json())["data"]
                        if job["state"] in ("succeeded", "failed"):
                            break
                        await asyncio.sleep(0.05)
                    ends.append(job)
                async with srv.http.get(
                    f"{srv.api}/default/api/buying/purchase_order", headers=srv.auth()
                ) as r:
                    orders = (await r.json())["data"]
            ledger = app.state()
        finally:
            app.stop()
        assert ends[0]["state"] == "succeeded", ends[0]
        assert ends[1]["state"] == "failed" and "budget has 9700.00 left" in ends[1]["error"]["detail"], ends[
            1
        ]
        assert ends[1]["error"]["saga"]["state"] == "compensated"
        assert [o["amount"] for o in orders] == ["300.00"]
        results = ends[0]["result"]["result"]
        assert results["reserve_budget"] == {"reserved": "300.00", "left": "9700.00"}
        assert results["notify_supplier"] == {"supplier": "ACME", "order": results["order"]}
        assert ledger == {"left": "9700.00", "reserved": 1, "notified": [results["notify_supplier"]]}
