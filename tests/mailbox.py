"""A real SMTP server on loopback (aiosmtpd) that keeps what it receives, for the password-reset tests."""

from __future__ import annotations

import email
import re
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from typing import Any

from tests import dex


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.port = 0

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"

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
