"""The event loop the server processes run on: uvloop where it is installed, asyncio's otherwise.

uvloop (libuv under Cython) does the loop's own work -- socket reads and writes, callbacks,
timers -- in C; under ``wrk`` a find-by-id spent about a quarter of the server's time in
asyncio's selector transport (``docs/performance.md``). It is a dependency on the platforms
it supports (Linux and macOS on CPython); elsewhere, or when ``DAP_EVENT_LOOP=asyncio`` asks for
it, the standard loop runs the same code. Nothing in ``dap`` depends on which loop it gets.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The constructor of the fastest available loop (``DAP_EVENT_LOOP=asyncio`` forces asyncio's)."""
    if os.environ.get("DAP_EVENT_LOOP", "").strip().lower() != "asyncio":
        try:
            import uvloop
        except ImportError:  # not installed on this platform: the plain loop does the same work
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def name() -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`run` would use (for banners and benchmarks)."""
    return "asyncio" if factory() is asyncio.new_event_loop else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop of :func:`factory`."""
    with asyncio.Runner(loop_factory=factory()) as runner:
        return runner.run(main)
