"""The control plane of ``dap dev``: a child process (``dap control serve --mode standalone --dev``).

A child, not an import: the pod it serves may not import ``dap.control`` (it trusts the control
plane's signature, not its code), and an HTTP peer is what the pod meets in production too. It runs in
a session of its own so that Ctrl-C reaches only ``dap dev``, which stops the pod first and the
control plane after it.

Stopping is quick on purpose: the pod's long poll may still be parked in the control plane
(``GET /v1/snapshot?wait=``) when the pod is gone, and aiohttp's graceful shutdown would wait
for it to time out. ``POST /v1/poll`` wakes every parked request first; a child that still
has not exited after ``STOP_GRACE`` seconds is killed (it holds nothing but Postgres
connections, whose transactions Postgres rolls back).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from dap.resource_pod import errors

START_TIMEOUT = 60.0
STOP_GRACE = 3.0


def signing_key(path: Path) -> Path:
    """The control plane's dev key file (32-byte seed as hex, mode 0600), created once."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(os.urandom(32).hex() + "\n")
    return path


def app_name(directory: Path) -> str:
    """The app name a spec directory is registered under (its folder name, as a slug)."""
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in directory.resolve().name.lower())
    name = name.strip("-_")
    return name if name[:1].isalpha() else f"app-{name}" if name else "app"


class Control:
    """The control plane child process and the three calls ``dap dev`` makes to it."""

    def __init__(
        self,
        *,
        port: int,
        dsn: str,
        key_file: Path,
        log_level: str,
        say: Callable[[str], None],
    ) -> None:
        self.port = port
        self.dsn = dsn
        self.key_file = key_file
        self.log_level = log_level
        self.say = say
        self.url = f"http://127.0.0.1:{port}"
        self.process: asyncio.subprocess.Process | None = None

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-c",
            "import sys; from dap.cli import main; sys.exit(main())",
            *("control", "serve", "--mode", "standalone", "--dev"),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--db", self.dsn, "--signing-key", str(signing_key(self.key_file))),
            *("--log-level", self.log_level),
        ]

    async def start(self, session: aiohttp.ClientSession) -> None:
        self.process = await asyncio.create_subprocess_exec(*self._command(), start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise errors.ConfigError(
                    f"the control plane exited with code {self.process.returncode} "
                    f"(is port {self.port} free? try --control-port)"
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=2)
                ) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise errors.ConfigError(
            f"the control plane did not answer {self.url}/health within {START_TIMEOUT:g}s"
        )

    async def stop(self, session: aiohttp.ClientSession) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        await self.poll(session)  # release parked long polls: nothing left for the shutdown to wait on
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE):
                await process.wait()
        except TimeoutError:
            self.say(f"  the control plane did not stop within {STOP_GRACE:g}s: killed")
            process.kill()
            await process.wait()

    async def register(
        self, session: aiohttp.ClientSession, *, app: str, workspace: str, files: Mapping[str, bytes]
    ) -> dict[str, Any] | None:
        """Register ``files``; print the problems and return ``None`` when they are refused."""
        body = {
            "app": app,
            "workspaces": [workspace],
            "files": [{"path": p, "content": base64.b64encode(c).decode("ascii")} for p, c in files.items()],
        }
        async with session.post(f"{self.url}/v1/artifacts", json=body) as response:
            answer: dict[str, Any] = await response.json(content_type=None)
            if response.status == 200:
                return answer
        self.say(f"registration refused ({response.status}): {answer.get('detail', answer)}")
        for item in answer.get("errors", []):
            where = (item.get("file") or "") + (f"#{item['document']}" if item.get("document") else "")
            self.say(f"  {where} {item.get('path', '')}: {item.get('message', '')}")
        return None

    async def poll(self, session: aiohttp.ClientSession) -> None:
        """Wake the pod's parked snapshot request (dev only), so a change arrives at once."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.post(f"{self.url}/v1/poll", timeout=aiohttp.ClientTimeout(total=2)):
                pass
