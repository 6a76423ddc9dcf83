"""Sagas survive ``kill -9`` of the ``dap serve`` running them, between any two persisted states.

A real ``dap serve`` subprocess (with the bridge, ``--job-lease 1s``) runs two sagas against the
test app process: one that completes and one whose last step is refused, so it compensates. Each
step and compensation is slow (the app applies it after a pause), so the server can be killed
while a call is in flight. The loop watches ``dap.saga_log`` and kills the server each time a new
state was persisted, then starts another; bounded by :data:`KILLS`. At the end each saga is in
its final state and the app's effects match it exactly: nothing applied twice (the idempotency
keys), nothing left applied after the compensation, no saga forgotten.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.bridge import saga_spec
from tests.bridge.test_sagas import SagaApp, free_port
from tests.server.conftest import token
from tests.server.test_serve_cli import DAP, _env

pytestmark = pytest.mark.asyncio(loop_scope="module")
KILLS = 8


def _serve(spec: Path, dsn: str, port: int, socket: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(
        [
            DAP,
            "serve",
            "--spec",
            str(spec),
            "--addr",
            f"127.0.0.1:{port}",
            "--metrics-addr",
            "",
            "--job-lease",
            "1s",
            "--sidecar-endpoint",
            socket,
            "--invoke-timeout",
            "5s",
        ],
        env=_env(dsn),
        stderr=out,
        stdout=subprocess.DEVNULL,
    )


def _call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token()}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _up(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dap serve exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except urllib.error.HTTPError:
            return  # answering at all is up
        except OSError:
            time.sleep(0.1)
    raise AssertionError("dap serve did not come up in 60 s")


def _effects(port: int, saga: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/saga/effects?saga={saga}", timeout=5) as resp:
        found: dict[str, Any] = json.loads(resp.read())
        return found


async def test_sagas_finish_exactly_across_kill_9_between_persisted_states(
    pg_dsn: str, tmp_path: Path
) -> None:
    with tempfile.TemporaryDirectory(prefix="dap-saga-kill-") as tmp:
        app = SagaApp(Path(tmp), free_port())
        app.start()
        spec = saga_spec.write(tmp_path, app.port, timeout="5s", retries=KILLS + 2)  # kills never use them up
        log = tmp_path / "serve.log"
        port = free_port()
        proc = _serve(spec, pg_dsn, port, app.endpoint, log)
        conn = await asyncpg.connect(pg_dsn)
        kills = 0
        try:
            _up(port, proc)
            slow = {"hold": "slow", "charge": "slow", "notify": "slow"}
            undo = {"hold.undo": "slow", "charge.undo": "slow"}
            ids = []
            for faults in (slow, {**slow, **undo, "notify": "fail"}):
                status, answer = _call(
                    "POST",
                    f"http://127.0.0.1:{port}/default/api/store/trip/book",
                    {"faults": faults, "slow_s": 0.4},
                )
                assert status == 202, answer
                ids.append(uuid.UUID(answer["data"]["id"]))
            seen = 0
            deadline = time.monotonic() + 120
            while kills < KILLS and time.monotonic() < deadline:
                count = await conn.fetchval("SELECT count(*) FROM dap.saga_log WHERE saga_id = ANY($1)", ids)
                open_ = await conn.fetchval(
                    "SELECT count(*) FROM dap.sagas WHERE id = ANY($1) AND state IN "
                    "('running', 'compensating')",
                    ids,
                )
                if count > seen and count > 0:  # a new state was persisted: kill the server now
                    seen = count
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=10)
                    kills += 1
                    port = free_port()
                    proc = _serve(spec, pg_dsn, port, app.endpoint, log)
                    _up(port, proc)
                elif count > 0 and open_ == 0:
                    break
                await asyncio.sleep(0.02)
            states: list[str] = []
            while time.monotonic() < deadline:
                states = [
                    await conn.fetchval("SELECT state FROM dap.sagas WHERE id = $1", i) or "none" for i in ids
                ]
                jobs = [await conn.fetchval("SELECT state FROM dap.jobs WHERE id = $1", i) for i in ids]
                if all(s in ("completed", "compensated") for s in states) and all(
                    j in ("succeeded", "failed") for j in jobs
                ):
                    break
                await asyncio.sleep(0.2)
            assert states == ["completed", "compensated"], (states, log.read_text()[-3000:])
            assert jobs == ["succeeded", "failed"]
            assert kills >= 4, kills  # the loop did kill between states
            assert _effects(app.port, str(ids[0])) == {
                "applied": ["charge", "hold", "notify"],
                "undone": [],
                "max_per_key": 1,
            }
            assert _effects(app.port, str(ids[1])) == {
                "applied": [],
                "undone": ["charge", "hold"],
                "max_per_key": 1,
            }
        finally:
            await conn.close()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            app.stop()
