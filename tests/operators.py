"""What the operator fixtures (emulator and real API server) share: operators run as tasks.

Operators are cancelled rather than stopped by flag: a graceful kopf stop waits for "hung" tasks.
"""

from __future__ import annotations

import asyncio
import contextlib

from dap.operator import options as operator_options
from dap.operator import running


class OperatorTasks:
    """The operators a test started, each a task running ``running.run``."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[running.Runtime]] = []

    def start(
        self, options: operator_options.Options
    ) -> tuple[running.Runtime, asyncio.Task[running.Runtime]]:
        runtime = running.Runtime(options)
        task = asyncio.create_task(running.run(options, runtime=runtime))
        self.tasks.append(task)
        return runtime, task

    async def stop_all(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=10)
        self.tasks.clear()
