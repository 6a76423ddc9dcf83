"""Outgoing mail (password reset links) over SMTP, configured by the environment.

``DAP_SMTP_HOST`` (required to send), ``DAP_SMTP_PORT`` (default 587), ``DAP_SMTP_FROM``
(required), ``DAP_SMTP_USER`` and ``DAP_SMTP_PASSWORD`` (login when both are set),
``DAP_SMTP_TLS``: ``starttls`` (default), ``ssl`` (implicit TLS, port 465) or ``none`` (loopback
relays and tests only). Building a message is pure; :func:`send` blocks (smtplib) and runs off the
event loop.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage

from dap.server import errors

TIMEOUT = 10.0
TLS_MODES = ("starttls", "ssl", "none")


@dataclass(frozen=True)
class Smtp:
    host: str
    port: int
    sender: str
    username: str | None = None
    password: str | None = None
    tls: str = "starttls"


def from_env(env: Mapping[str, str]) -> Smtp | None:
    """The SMTP settings, ``None`` when ``DAP_SMTP_HOST`` is unset; ``BootRefused`` when wrong."""
    host = env.get("DAP_SMTP_HOST")
    if not host:
        return None
    sender = env.get("DAP_SMTP_FROM")
    if not sender or "@" not in sender:
        raise errors.BootRefused("DAP_SMTP_FROM must be the sender's address when DAP_SMTP_HOST is set")
    tls = env.get("DAP_SMTP_TLS", "starttls")
    if tls not in TLS_MODES:
        raise errors.BootRefused(f"DAP_SMTP_TLS must be one of {list(TLS_MODES)}")
    try:
        port = int(env.get("DAP_SMTP_PORT", "465" if tls == "ssl" else "587"))
    except ValueError as exc:
        raise errors.BootRefused("DAP_SMTP_PORT must be a port number") from exc
    return Smtp(host, port, sender, env.get("DAP_SMTP_USER"), env.get("DAP_SMTP_PASSWORD"), tls)


def reset_message(smtp: Smtp, *, to: str, username: str, link: str, title: str, minutes: int) -> EmailMessage:
    message = EmailMessage()
    message["From"] = smtp.sender
    message["To"] = to
    message["Subject"] = f"Reset your password for {title}"
    message.set_content(
        f"Hello {username},\n\n"
        f"someone asked to reset your password for {title}. To choose a new one, open\n\n"
        f"{link}\n\n"
        f"The link works once, for {minutes} minutes. If you did not ask, ignore this mail:\n"
        "your password stays as it is.\n"
    )
    return message


def send(smtp: Smtp, message: EmailMessage) -> None:
    """Deliver ``message``; ``ServiceUnavailable`` when the relay cannot be reached or refuses it."""
    try:
        client: smtplib.SMTP
        if smtp.tls == "ssl":
            client = smtplib.SMTP_SSL(
                smtp.host, smtp.port, timeout=TIMEOUT, context=ssl.create_default_context()
            )
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=TIMEOUT)
        with client:
            if smtp.tls == "starttls":
                client.starttls(context=ssl.create_default_context())
            if smtp.username and smtp.password:
                client.login(smtp.username, smtp.password)
            client.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise errors.ServiceUnavailable(
            f"the mail relay {smtp.host}:{smtp.port} did not take the message: {exc!r}",
            retry_after=60,
            code="SVC.MAIL.UNAVAILABLE",
        ) from exc
