"""``dap dev`` as a person runs it, for the tests: a real process, real ports, Ctrl-C at the end.

Each session gets free ports and reads the process's output on a thread, so a test can wait for a
line with a deadline and measure how long the wait took; ``stop`` sends SIGINT and measures the
shutdown. The embedded Postgres is the one ``dap dev`` starts itself in ``--data-dir`` unless a
``--dsn`` is among the arguments: that is the newcomer's path.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def dap(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from dap.cli import main; sys.exit(main())", *args]


class DevSession:
    """One ``dap dev`` process; a context manager that kills it if the test did not stop it."""

    def __init__(self, *args: str, data_dir: Path, cwd: Path = REPO) -> None:
        self.api, self.admin, self.control = free_port(), free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.api}"
        command = dap(
            "dev",
            *args,
            *("--data-dir", str(data_dir)),
            *("--addr", f"127.0.0.1:{self.api}"),
            *("--admin-addr", f"127.0.0.1:{self.admin}"),
            *("--control-port", str(self.control)),
        )
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "DAP_LOG_LEVEL": "error"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def mark(self) -> int:
        """A place in the output: ``wait_for(..., since=mark)`` looks only at what follows it."""
        return len(self.output)

    def wait_for(self, text: str, within: float = 90.0, since: int = 0) -> float:
        """Seconds since start until ``text`` appeared in the output (after ``since``)."""
        deadline = time.monotonic() + within
        while text not in self.output[since:]:
            if self.process.poll() is not None and not self._reader.is_alive():
                code = self.process.returncode
                raise AssertionError(f"dap dev exited ({code}) before {text!r}:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {within:g}s:\n{self.output}")
            time.sleep(0.05)
        return time.monotonic() - self.started

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def stop(self) -> float:
        """Ctrl-C; the seconds until the process exited (code 0 asserted)."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=30)
        took = time.monotonic() - began
        self._reader.join(timeout=5)
        assert code == 0, self.output
        return took

    def __enter__(self) -> DevSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:  # a failed test: Ctrl-C still stops the embedded Postgres
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
