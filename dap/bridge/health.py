"""Health of the app process: a ping every 10 s; degraded after 3 failures in a row; recovery.

Pure state (:class:`Health`) plus one loop (:func:`watch`). While degraded the server still serves
every request that needs no app handler; a sidecar invoke is refused at once with 503 (instead of
waiting for a timeout), and the admin ``/health`` reports the reason, so it answers 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

INTERVAL = 10.0
FAILURES = 3


@dataclass
class Health:
    failures: int = 0
    degraded: bool = False
    last_error: str | None = None
    checked_at: float | None = None

    def record(self, error: str | None) -> None:
        self.checked_at = time.time()
        if error is None:
            self.failures, self.degraded, self.last_error = 0, False, None
            return
        self.failures += 1
        self.last_error = error
        if self.failures >= FAILURES:
            self.degraded = True

    def report(self) -> dict[str, Any]:
        return {
            "status": "degraded" if self.degraded else "healthy",
            "failures": self.failures,
            "reasons": [f"app process: {self.last_error}"] if self.degraded else [],
            "checked_at": self.checked_at,
        }


async def watch(health: Health, ping: Callable[[], Awaitable[None]], *, interval: float = INTERVAL) -> None:
    """Ping until cancelled; every outcome goes into ``health``."""
    while True:
        error: str | None = None
        try:
            async with asyncio.timeout(max(interval / 2, 0.1)):
                await ping()
        except Exception as exc:  # any failure counts: refused, timeout, bad status
            error = f"{exc.__class__.__name__}: {exc}"[:200]
        health.record(error)
        await asyncio.sleep(interval)


async def stop(task: asyncio.Task[None] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
