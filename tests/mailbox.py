"""A real SMTP server on loopback (aiosmtpd) that keeps what it receives, for the password-reset tests.

``reply`` is what it answers a message's DATA (``"421 …"`` makes it a relay that refuses) and
``delay`` how long it thinks first (a slow relay).
"""

from __future__ import annotations

import asyncio
import email
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from typing import Any

from tests import dex

WAIT = 10.0  # seconds a test waits for the mail it expects


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.port = 0
        self.reply = "250 OK"
        self.delay = 0.0

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        await asyncio.sleep(self.delay)
        if self.reply.startswith("250"):
            self.messages.append(email.message_from_bytes(envelope.content))
        return self.reply

    async def wait(self, count: int) -> None:
        """Until ``count`` messages arrived (mail goes out after the answer, in the background)."""
        deadline = time.monotonic() + WAIT
        while len(self.messages) < count:
            assert time.monotonic() < deadline, f"{len(self.messages)} of {count} messages in {WAIT} s"
            await asyncio.sleep(0.02)

    def wait_blocking(self, count: int) -> None:
        """``wait`` for a test outside the event loop (the UI's, driving a browser)."""
        deadline = time.monotonic() + WAIT
        while len(self.messages) < count:
            assert time.monotonic() < deadline, f"{len(self.messages)} of {count} messages in {WAIT} s"
            time.sleep(0.02)

    def body(self, n: int = -1) -> str:
        payload = self.messages[n].get_payload(decode=True)
        assert isinstance(payload, bytes)
        return payload.decode()

    def link(self, n: int = -1) -> str:
        found = re.search(r"https?://\S+#/reset\?token=[A-Za-z0-9_-]+", self.body(n))
        assert found, self.body(n)
        return found.group(0)

    def env(self) -> dict[str, str]:
        """The dap server's settings for this relay (no TLS: loopback only)."""
        return {
            "DAP_SMTP_HOST": "127.0.0.1",
            "DAP_SMTP_PORT": str(self.port),
            "DAP_SMTP_FROM": "dap@example.com",
            "DAP_SMTP_TLS": "none",
        }


@contextmanager
def smtp_server() -> Iterator[Inbox]:
    from aiosmtpd.controller import Controller

    box = Inbox()
    box.port = dex.free_port()
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
