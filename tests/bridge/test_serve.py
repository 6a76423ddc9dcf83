"""``dap serve --sidecar-endpoint`` as a spawned process: the entry point hosts the bridge, and a
sidecar action reaches the app process through it; ``dap bridge`` says it is deprecated."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tests.server.conftest import token
from tests.server.test_serve_cli import DAP, _env, _port, _wait_banner

from .conftest import SPEC, AppProcess


def request(url: str, body: object = None) -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    req.add_header("Authorization", f"Bearer {token()}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_dap_serve_hosts_the_bridge(pg_dsn: str) -> None:
    with tempfile.TemporaryDirectory(prefix="dap-serve-") as tmp:
        process = AppProcess(Path(tmp))
        process.start()
        port = _port()
        env = {**_env(pg_dsn), "DAP_STATE_DIR": str(Path(tmp) / "state")}
        proc = subprocess.Popen(
            [
                DAP,
                "serve",
                "--spec",
                str(SPEC),
                "--addr",
                f"127.0.0.1:{port}",
                "--metrics-addr",
                "",
                "--sidecar-endpoint",
                process.endpoint,
                "--invoke-timeout",
                "5s",
            ],
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        try:
            _wait_banner(proc)
            base = f"http://127.0.0.1:{port}/default/api/store"
            status, it = request(f"{base}/item", {"sku": "cli", "stock": 4})
            assert status == 201, it
            item = it["data"]
            assert isinstance(item, dict)
            status, o = request(f"{base}/order", {"item": item["id"], "qty": 3})
            order = o["data"]
            assert isinstance(order, dict)
            status, answer = request(f"{base}/order/{order['id']}/reserve", {})
            assert status == 200 and answer["result"] == {"stock": 1}, answer
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            process.stop()


def test_dap_bridge_is_deprecated() -> None:
    done = subprocess.run([DAP, "bridge"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "deprecated" in done.stderr and "--sidecar-endpoint" in done.stderr
