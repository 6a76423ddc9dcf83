"""Waiting and stopping helpers shared by the pod's loops.

``asyncio.wait_for`` on Python 3.11 can swallow a cancellation that arrives while the awaited
future completes, leaving a loop running after ``stop``; ``asyncio.timeout`` tracks its own
cancellation apart from the caller's, so the loops wait with it. :func:`cancel_all` still
cancels again until every task is gone, because a third-party library may swallow one too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` passed; ``True`` when it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


async def cancel_all(
    tasks: Iterable[asyncio.Task[None]], *, patience: float = 1.0, attempts: int = 10
) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again whatever ignored the first request."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(attempts):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=patience)
    for task in pending:
        log.error("task ignored cancellation", extra={"ctx": {"task": task.get_name()}})
