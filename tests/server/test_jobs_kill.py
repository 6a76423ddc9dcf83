"""A job survives a ``kill -9`` of the ``dap serve`` running it: a second process takes it over once
the lease runs out and runs it from the start (the killed run committed nothing), and a job whose
workers keep dying is failed, never left ``running``."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from .conftest import token
from .services_spec import EFFECTS, install_handlers, write_spec
from .test_serve_cli import DAP, _env, _port, _wait_banner

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _serve(spec: Path, dsn: str, port: int, handlers: Path) -> subprocess.Popen[str]:
    env = _env(dsn)
    env["PYTHONPATH"] = str(handlers)
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
        ],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
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


def _wait(url: str, done: Any, seconds: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status, answer = _call("GET", url)
        assert status == 200, answer
        if done(answer["data"]):
            return dict(answer["data"])
        assert time.monotonic() < deadline, f"job never got there: {answer}"
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_a_job_of_a_killed_server_is_taken_over_by_another(pg_dsn: str, tmp_path: Path) -> None:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute(EFFECTS)
    await conn.close()
    spec = write_spec(tmp_path / "spec")
    handlers = install_handlers(tmp_path)
    hold = tmp_path / "hold"
    hold.touch()
    tag = uuid.uuid4().hex
    port_a, port_b = _port(), _port()
    first = _serve(spec, pg_dsn, port_a, handlers)
    second: subprocess.Popen[str] | None = None
    try:
        _wait_banner(first)
        status, answer = _call(
            "POST", f"http://127.0.0.1:{port_a}/default/api/ops/tools/crunch", {"tag": tag, "hold": str(hold)}
        )
        assert status == 202, answer
        job_path = f"/default/api/ops/tools/_jobs/{answer['data']['id']}"
        _wait(
            f"http://127.0.0.1:{port_a}{job_path}", lambda j: j["state"] == "running" and j["progress"] == 10
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        hold.unlink()  # the next run goes through
        second = _serve(spec, pg_dsn, port_b, handlers)
        _wait_banner(second)
        job = _wait(f"http://127.0.0.1:{port_b}{job_path}", lambda j: j["state"] in ("succeeded", "failed"))
        assert job["state"] == "succeeded", job
        assert job["runs"] == 2 and job["progress"] == 100
        assert job["result"]["result"]["pid"] == second.pid  # run again by the second process
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM public.job_effects WHERE tag = $1", tag) == 1
            # a job whose workers died every time it ran (twice before, now a third time): failed by
            # the next sweep, not claimed again and not running forever
            lost = uuid.uuid4()
            await conn.execute(
                "INSERT INTO dap.jobs (id, tenant_id, target, kind, action, principal, body, state, runs, "
                "lost, worker, lease_until) SELECT $1, id, 'ops/tools', 'service', 'crunch', '{}', '{}', "
                "'running', 3, 2, 'gone', now() - interval '1 s' FROM dap.workspaces WHERE slug = 'default'",
                lost,
            )
            deadline = time.monotonic() + 10
            while (
                state := await conn.fetchval("SELECT state FROM dap.jobs WHERE id = $1", lost)
            ) == "running":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            error = await conn.fetchval("SELECT error->>'code' FROM dap.jobs WHERE id = $1", lost)
        finally:
            await conn.close()
        assert state == "failed" and error == "SVC.JOB.WORKER_LOST"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if second is not None:
            _stop(second)
