"""The wire contract between the bridge and the app process. Pure.

Headers of an invoke (bridge → app) and of a ``/ctx`` call (app → bridge), the endpoint forms
``--sidecar-endpoint`` accepts, and the reading of an invoke's answer::

    POST /invoke/{module}/{entity}/{action}   {resource_id, resource, params}
         X-Svc-Scope-Id   the invoke's transaction scope: echo it on a /ctx call to join it
         X-Svc-Invoke-Id  the invoke itself: echo it alone for a /ctx call that commits by itself
         X-Svc-Ctx-Url    where /ctx is served (a loopback URL, or unix:///path)
    200 {data, new_state, events: [{name, payload}]}   500 {error}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dap.server.workflows import sidecars

SCOPE = "X-Svc-Scope-Id"
INVOKE = "X-Svc-Invoke-Id"
CTX_URL = "X-Svc-Ctx-Url"
_EVENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,127}")


class BadReplyError(ValueError):
    """The app's 200 is not ``{data, new_state, events}``."""


@dataclass(frozen=True)
class Endpoint:
    """Where the app process listens: a unix socket path, or a base URL on this host."""

    base: str  # http://host:port, or http://app for a socket
    socket: str | None = None

    @property
    def shown(self) -> str:
        return f"unix://{self.socket}" if self.socket else self.base


def parse_endpoint(text: str) -> Endpoint:
    """``unix:///run/app.sock`` or ``http://127.0.0.1:9000``; ``ValueError`` saying what is accepted."""
    text = text.strip()
    if text.startswith("unix:"):
        path = text[len("unix:") :].lstrip("/")
        if not path:
            raise ValueError(f"{text!r} names no socket: write unix:///absolute/path.sock")
        return Endpoint("http://app", "/" + path)
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"{text!r} is not unix:///path.sock or http://host:port (no path, plain HTTP)")
    return Endpoint(f"http://{parts.netloc}")


def invoke_path(entity: str, action: str) -> str:
    return f"/invoke/{entity}/{action}"


def parse_reply(body: Any) -> sidecars.Reply:
    """A 200's JSON as a :class:`sidecars.Reply`; ``BadReplyError`` naming what is wrong."""
    if not isinstance(body, dict):
        raise BadReplyError("the answer is not a JSON object")
    new_state = body.get("new_state")
    if new_state == "":
        new_state = None
    if new_state is not None and not isinstance(new_state, str):
        raise BadReplyError("new_state must be a string")
    raw_events = body.get("events")
    if raw_events is None:
        raw_events = []
    if not isinstance(raw_events, list):
        raise BadReplyError("events must be a list")
    events = []
    for i, e in enumerate(raw_events):
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("name"), str)
            or not _EVENT_NAME.fullmatch(e["name"])
        ):
            raise BadReplyError(f"events[{i}] must be {{name, payload}} with a name like order.placed")
        payload = e.get("payload") or {}
        if not isinstance(payload, dict):
            raise BadReplyError(f"events[{i}].payload must be an object")
        events.append(sidecars.Event(e["name"], payload))
    return sidecars.Reply(body.get("data"), new_state, tuple(events))


def error_of(body: Any, fallback: str) -> str:
    """The ``error`` text of a failed invoke, else ``fallback``; at most 500 characters."""
    text = body.get("error") if isinstance(body, dict) else None
    return (text if isinstance(text, str) and text else fallback)[:500]
