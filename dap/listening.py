"""Opening a listener, and the one line a process says when it cannot.

Every long-running command listens on addresses its options name (``dap serve``'s ``--addr``,
``--metrics-addr``, ``--grpc-addr`` and ``--ctx-listen``, the same in ``dap pod`` and ``dap dev``,
``dap control serve``'s ``--host``/``--port``). An address another process holds, or one this
machine does not have, must end the command at once, non-zero, with a line naming the address and
the option that chose it: a process that runs on without its listener (or retries behind it)
serves nobody and hides why (issue 40). Each command's entry point catches :class:`ListenError`
and prints it; whatever was started before the listener is stopped by the caller's own cleanup.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # dap.server.cli imports this before deciding to serve: aiohttp stays unloaded
    from aiohttp import web


class ListenError(Exception):
    """A listener could not be opened; ``str()`` is the whole message."""

    def __init__(self, what: str, where: str, reason: str) -> None:
        self.address = where
        super().__init__(f"cannot listen on {where} ({what}): {reason}")


def address(host: str, port: int) -> str:
    """``host:port`` as a person types it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reason(exc: OSError) -> str:
    """Why the bind failed, in words, with what to do for the common cases."""
    if exc.errno == errno.EADDRINUSE:
        return "the address is already in use; stop the process holding it or choose another port"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (ports below 1024 need privileges); choose a port above 1023"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "this machine has no such address; give one of its own, or 0.0.0.0 for all"
    return os.strerror(exc.errno) if exc.errno else str(exc)


async def start(site: web.BaseSite, what: str, where: str) -> None:
    """``site.start()``, a failed bind raised as :class:`ListenError` (``where``: the address as
    the option gave it, ``address(host, port)`` or ``unix:///path``)."""
    try:
        await site.start()
    except OSError as exc:
        raise ListenError(what, where, reason(exc)) from exc
