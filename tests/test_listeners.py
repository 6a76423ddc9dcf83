"""Every listener of every long-running command, started on a port another process holds.

Issue 40 row 18: ``dap control serve --port P`` with P taken kept running and logged "pool is
closing" every 5 s. A command that cannot listen must exit non-zero within seconds, saying which
address it could not take. Each row binds a socket first, runs the real command as a subprocess
(on the session's Postgres, so no embedded one starts) and reads its stderr.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DAP = str(Path(sys.executable).parent / "dap")
SPEC = Path(__file__).parents[1] / "examples" / "procurement"
SERVE = ["--jwt-secret", "s" * 32, "--cors-origin", "http://localhost:1", "--addr", "127.0.0.1:0"]
CONTROL = ["control", "serve", "--host", "127.0.0.1"]
POD = ["pod", "--dev", "--control-url", "http://127.0.0.1:9", "--workspace-id", "default", *SERVE]
POD_NONE = ["--metrics-addr", "", "--grpc-addr", ""]
QUIET = ["--metrics-addr", ""]


def _free() -> int:
    """A port free now (dev's control plane needs a real one: it is polled at that port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# (argv after ``dap``, given the taken port, the DSN and a scratch directory)
Argv = Callable[[int, str, Path], list[str]]
CASES: list[tuple[str, Argv]] = [
    ("control-standalone", lambda p, dsn, _: [*CONTROL, "--dev", "--db", dsn, "--port", str(p)]),
    (
        "control-region",
        lambda p, dsn, _: [*CONTROL, "--mode", "region", "--dev", "--db", dsn, "--port", str(p)],
    ),
    (
        "control-cluster",
        lambda p, dsn, _: [
            *CONTROL,
            *("--mode", "cluster", "--region-url", "http://127.0.0.1:9", "--db", dsn, "--port", str(p)),
        ],
    ),
    (
        "serve-addr",
        lambda p, dsn, _: [
            "serve",
            "--spec",
            str(SPEC),
            "--dsn",
            dsn,
            *SERVE,
            *QUIET,
            "--addr",
            f"127.0.0.1:{p}",
        ],
    ),
    (
        "serve-metrics",
        lambda p, dsn, _: [
            "serve",
            "--spec",
            str(SPEC),
            "--dsn",
            dsn,
            *SERVE,
            "--metrics-addr",
            f"127.0.0.1:{p}",
        ],
    ),
    (
        "serve-grpc",
        lambda p, dsn, _: [
            "serve",
            "--spec",
            str(SPEC),
            "--dsn",
            dsn,
            *SERVE,
            *QUIET,
            "--grpc-addr",
            f"127.0.0.1:{p}",
        ],
    ),
    (
        "serve-ctx",
        lambda p, dsn, _: [
            *("serve", "--spec", str(SPEC), "--dsn", dsn, *SERVE, *QUIET),
            *("--sidecar-endpoint", "http://127.0.0.1:9", "--ctx-listen", f"127.0.0.1:{p}"),
        ],
    ),
    (
        "pod-addr",
        lambda p, dsn, d: [*POD, "--dsn", dsn, "--state-dir", str(d), *POD_NONE, "--addr", f"127.0.0.1:{p}"],
    ),
    (
        "pod-metrics",
        lambda p, dsn, d: [*POD, "--dsn", dsn, "--state-dir", str(d), "--metrics-addr", f"127.0.0.1:{p}"],
    ),
    (
        "pod-ctx",
        lambda p, dsn, d: [
            *(*POD, "--dsn", dsn, "--state-dir", str(d), *QUIET),
            *("--sidecar-endpoint", "http://127.0.0.1:9", "--ctx-listen", f"127.0.0.1:{p}"),
        ],
    ),
    (
        "dev-control",
        lambda p, dsn, d: [
            *("dev", "--spec", str(SPEC), "--dsn", dsn, "--data-dir", str(d), "--no-seed"),
            *("--addr", "127.0.0.1:0", "--admin-addr", "", "--control-port", str(p)),
        ],
    ),
    (
        "dev-addr",
        lambda p, dsn, d: [
            *("dev", "--spec", str(SPEC), "--dsn", dsn, "--data-dir", str(d), "--no-seed"),
            *("--addr", f"127.0.0.1:{p}", "--admin-addr", "", "--control-port", str(_free())),
        ],
    ),
    (
        "dev-admin",
        lambda p, dsn, d: [
            *("dev", "--spec", str(SPEC), "--dsn", dsn, "--data-dir", str(d), "--no-seed"),
            *("--addr", "127.0.0.1:0", "--admin-addr", f"127.0.0.1:{p}", "--control-port", str(_free())),
        ],
    ),
]


POD_GRPC = pytest.param(
    lambda p, dsn, d: [*POD, "--dsn", dsn, "--state-dir", str(d), *QUIET, "--grpc-addr", f"127.0.0.1:{p}"],
    id="pod-grpc",
)


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port some other process is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.parametrize("argv", [*(pytest.param(argv, id=name) for name, argv in CASES), POD_GRPC])
def test_a_taken_port_ends_the_command_naming_the_address(
    argv: Argv, taken: int, pg_server_dsn: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    process = subprocess.Popen(
        [DAP, *argv(taken, pg_server_dsn, tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # its own group: a child it started (dev's control) goes with it
    )
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        pytest.fail(f"still running after 30 s with its port taken; stderr: {stderr!r}")
    assert process.returncode != 0, stderr
    assert f"127.0.0.1:{taken}" in stderr, stderr
    assert "Traceback" not in stderr, stderr
