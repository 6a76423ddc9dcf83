"""A spawned ``dap serve`` / ``dap migrate``: banner, real requests, graceful stop, migration refusals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dap.server.web import app as web_app

from .conftest import ORIGIN, SECRET

DAP = str(Path(sys.executable).parent / "dap")

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: inv}\nspec: {title: Inventory}\n"
ENTITY = """apiVersion: dap.io/v1
kind: Entity
metadata: {name: thing, module: inv}
spec:
  fields:
%s
  expose:
    - type: rest
"""


def _write(spec: Path, fields: str) -> None:
    spec.mkdir(exist_ok=True)
    (spec / "module.yaml").write_text(MODULE)
    (spec / "thing.yaml").write_text(ENTITY % fields)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update({"DAP_DSN": dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": ORIGIN})
    return env


def _serve(spec: Path, dsn: str, port: int, **env: str) -> subprocess.Popen[str]:
    """``dap serve`` of ``spec`` on ``port``; ``env``: variables beside the test's (``DAP_…``)."""
    return subprocess.Popen(
        [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""],
        env={**_env(dsn), **env},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def _wait_banner(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"dap serve exited with {proc.returncode}")
        if line.startswith("dap serve: listening"):
            return line
    raise AssertionError("no banner within 60 s")


def _refused(args: list[str], dsn: str) -> str:
    done = subprocess.run([DAP, *args], env=_env(dsn), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_serve_migrate_cycle(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    _write(spec, "    - {name: label, type: string}\n    - {name: size, type: integer}")
    port = _port()
    proc = _serve(spec, pg_dsn, port)
    try:
        banner = _wait_banner(proc)
        ui = "UI from" if web_app.find_web_dir(None) is not None else "API only"  # built by make ui or not
        assert ui in banner and "admin listener off" in banner
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/default/_ui/_meta/apps", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None and "shutting down" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()

    # a declared rename is destructive: boot refused with a pointer to dap migrate, nothing changed
    _write(
        spec,
        "    - {name: title, type: string, renamed_from: label, reason: wording}\n"
        "    - {name: size, type: integer}",
    )
    line = _refused(
        ["serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""], pg_dsn
    )
    assert "dap migrate" in line and "rename column" in line

    done = subprocess.run(
        [DAP, "migrate", "--spec", str(spec), "--dry-run"],
        env=_env(pg_dsn),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 0
        and "[destructive] rename column" in done.stdout
        and "nothing applied" in done.stdout
    )
    done = subprocess.run(
        [DAP, "migrate", "--spec", str(spec)], env=_env(pg_dsn), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "reason: wording" in done.stdout and "applied 1 step(s)" in done.stdout

    # an undeclared drop blocks both serve and migrate
    _write(spec, "    - {name: title, type: string}")
    assert "removed: true" in _refused(["serve", "--spec", str(spec), "--metrics-addr", ""], pg_dsn)
    assert "nothing was changed" in _refused(["migrate", "--spec", str(spec)], pg_dsn)

    _write(spec, "    - {name: title, type: string}\n    - {name: size, type: integer}")
    proc = _serve(spec, pg_dsn, port)
    try:
        _wait_banner(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_invalid_spec_is_a_one_line_refusal(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "bad"
    _write(spec, "    - {name: Bad Name, type: string}")
    assert "dap validate" in _refused(["serve", "--spec", str(spec)], pg_dsn)
    assert "not a directory" in _refused(["serve", "--spec", str(tmp_path / "missing")], pg_dsn)


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        pytest.param("algorithms: [RS256, HS256]", "algorithms", id="hmac"),
        pytest.param("leeway: 600", "leeway", id="leeway"),
    ],
)
def test_a_provider_the_server_could_not_use_refuses_the_boot(
    pg_dsn: str, tmp_path: Path, declared: str, named: str
) -> None:
    # before, such a workspace booted and then answered 500 to every request, local tokens too
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "m.yaml").write_text(MODULE.replace("inv", "idp"))  # a module of its own: no schema history
    (spec / "ws.yaml").write_text(
        "apiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: acme}\nspec:\n  auth:\n    providers:\n"
        f"      corp: {{issuer: 'https://id.example.com', client_id: dap, {declared}}}\n"
    )
    line = _refused(
        ["serve", "--spec", str(spec), "--addr", f"127.0.0.1:{_port()}", "--metrics-addr", ""], pg_dsn
    )
    assert f"spec.auth.providers.corp.{named}" in line and "dap validate" in line, line


def test_address_in_use_is_a_one_line_refusal(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "m.yaml").write_text(MODULE.replace("inv", "ports"))  # a module of its own: no schema history
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _refused(
            ["serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""], pg_dsn
        )
    assert "cannot listen" in line and "in use" in line


def test_a_grpc_address_in_use_is_a_one_line_refusal(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "m.yaml").write_text(MODULE.replace("inv", "rpcports"))  # a module of its own
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--spec", str(spec), "--addr", "127.0.0.1:0", "--metrics-addr", ""]
        line = _refused([*args, "--grpc-addr", f"127.0.0.1:{port}"], pg_dsn)
    assert f"cannot listen on --grpc-addr 127.0.0.1:{port}" in line and "in use" in line, line
