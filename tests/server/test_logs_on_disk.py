"""The logs window on disk (``--logs-file``), across a restart of a real ``dap serve``: a request of the
first run is found by ``GET /logs`` of the second, although the second's memory never held it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .conftest import ADMIN
from .test_serve_cli import DAP, _env, _port, _wait_banner, _write


def _serve(spec: Path, dsn: str, port: int, admin: int, logs_file: Path) -> subprocess.Popen[str]:
    env = {**_env(dsn), "DAP_LOGS_WINDOW": "50", "DAP_ADMIN_SECRET": ADMIN}
    args = [
        "serve",
        "--spec",
        str(spec),
        "--addr",
        f"127.0.0.1:{port}",
        "--metrics-addr",
        f"127.0.0.1:{admin}",
    ]
    args += ["--log-debug", "--logs-file", str(logs_file), "--logs-file-size", "1MiB"]
    return subprocess.Popen(
        [DAP, *args], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )


def _get(url: str, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_logs_query_reads_the_previous_runs_lines_from_disk(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    _write(spec, "    - {name: label, type: string}")
    logs_file = tmp_path / "logs" / "dap.jsonl"
    port, admin = _port(), _port()
    first = _serve(spec, pg_dsn, port, admin, logs_file)
    try:
        _wait_banner(first)
        meta = f"http://127.0.0.1:{port}/default/_ui/_meta/apps"
        _get(meta, {"X-Request-Id": "req-first-run"})
    finally:
        _stop(first)
    assert "req-first-run" in logs_file.read_text()

    second = _serve(spec, pg_dsn, port, admin, logs_file)
    try:
        _wait_banner(second)
        for n in range(60):  # more than the memory's 50 lines: the first run's are on disk only
            _get(meta, {"X-Request-Id": f"req-second-{n}"})
        time.sleep(0.2)
        bearer = {"Authorization": f"Bearer {ADMIN}"}
        query = urllib.parse.urlencode({"filter": "request=req-first-run"})
        body = _get(f"http://127.0.0.1:{admin}/logs?{query}", bearer)
        assert [(line["msg"], line["request_id"]) for line in body["data"]] == [("request", "req-first-run")]
        assert body["data"][0]["route"] and body["data"][0]["status"] == 200
        query = urllib.parse.urlencode({"filter": "msg=request", "limit": "1000"})
        ids = [line["request_id"] for line in _get(f"http://127.0.0.1:{admin}/logs?{query}", bearer)["data"]]
        assert ids == ["req-first-run", *(f"req-second-{n}" for n in range(60))]  # once each, in order
    finally:
        _stop(second)
