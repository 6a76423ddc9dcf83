"""Child-process mode: the bridge starts the app process itself and keeps it running.

``--runtime python|node|php`` (an optional ``:version`` suffix is informational) starts
``<interpreter> <app-dir>/<entrypoint>`` (``app.py``, ``app.js``, ``app.php`` unless
``--app-entrypoint`` says otherwise) with ``SVC_APP_SOCKET`` (where the app must listen) and
``SVC_SIDECAR_SOCKET`` (where ``/ctx`` is served), both ``unix://`` paths. A child that exits is
started again after a backoff that doubles from 0.5 s up to 30 s and falls back to the start once
a child has lived a minute. Stopping sends SIGTERM, then SIGKILL after ``stop_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)
INTERPRETERS = {"python": sys.executable, "node": "node", "php": "php"}
ENTRYPOINTS = {"python": "app.py", "node": "app.js", "php": "app.php"}
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
HEALTHY_AFTER = 60.0


def command(runtime: str, app_dir: Path, entrypoint: str | None) -> list[str]:
    """The child's command line; ``ValueError`` saying what is wrong."""
    name = runtime.partition(":")[0]
    if name not in INTERPRETERS:
        raise ValueError(f"--runtime {runtime!r}: expected python, node or php (an optional :version)")
    interpreter = INTERPRETERS[name]
    if shutil.which(interpreter) is None and not os.path.isfile(interpreter):
        raise ValueError(f"--runtime {name}: {interpreter} is not installed")
    script = app_dir / (entrypoint or ENTRYPOINTS[name])
    if not script.is_file():
        raise ValueError(f"the app entrypoint {script} does not exist (--app-dir, --app-entrypoint)")
    return [interpreter, str(script)]


def next_backoff(current: float, lived: float) -> float:
    if lived >= HEALTHY_AFTER:
        return FIRST_BACKOFF
    return min(MAX_BACKOFF, current * 2)


class Child:
    """One supervised app process."""

    def __init__(
        self, argv: list[str], *, app_socket: Path, ctx_socket: Path, cwd: Path, stop_timeout: float = 10.0
    ) -> None:
        self.argv = argv
        self.app_socket = app_socket
        self.ctx_socket = ctx_socket
        self.cwd = cwd
        self.stop_timeout = stop_timeout
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def _spawn(self) -> asyncio.subprocess.Process:
        self.app_socket.unlink(missing_ok=True)
        env = {
            **os.environ,
            "SVC_APP_SOCKET": f"unix://{self.app_socket}",
            "SVC_SIDECAR_SOCKET": f"unix://{self.ctx_socket}",
        }
        self.starts += 1
        return await asyncio.create_subprocess_exec(*self.argv, cwd=self.cwd, env=env)

    async def _supervise(self) -> None:
        backoff = FIRST_BACKOFF
        while not self._stopping:
            started = time.monotonic()
            self.proc = await self._spawn()
            code = await self.proc.wait()
            if self._stopping:
                return
            lived = time.monotonic() - started
            backoff = next_backoff(backoff, lived) if self.starts > 1 else FIRST_BACKOFF
            log.warning("app process exited with %s after %.1f s; restarting in %.1f s", code, lived, backoff)
            await asyncio.sleep(backoff)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._supervise())
        for _ in range(200):  # the app has 10 s to open its socket
            if self.app_socket.exists():
                return
            await asyncio.sleep(0.05)
        log.warning("the app process has not opened %s yet", self.app_socket)

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), self.stop_timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
