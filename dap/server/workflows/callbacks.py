"""Callbacks of tracked jobs: where a result may be POSTed, how it is signed, when it is retried.

An action declaring ``callback: {channel: webhook, header: NAME}`` takes the URL of its callback
from the request header ``NAME`` (``X-Callback-Url`` when the manifest names none); a call without
that header is a job without a callback. The URL is checked at request time (422
``SVC.JOB.CALLBACK_REFUSED``) and again before each delivery (a name may resolve elsewhere later):

- ``http`` or ``https``, with a host;
- every address the host resolves to is public: loopback, private (RFC 1918, ULA), link-local
  (cloud metadata services live there), shared, multicast, reserved and unspecified addresses are
  refused — unless the address lies in a network allow-listed by ``--callback-allow CIDR``. A
  delivery connects to the very addresses it checked (:class:`_Pinned`), never to a second answer
  of the resolver.

The body is ``{"type": "job.succeeded"|"job.failed", "timestamp", "data": job}``. With ``sign:
true`` it carries the Standard Webhooks headers (``webhook-id`` = the job id, the same on every
retry; ``webhook-timestamp``; ``webhook-signature`` = ``v1,<HMAC-SHA256>`` under the server's
``--callback-secret``), made by the ``standardwebhooks`` package, so a receiver verifies it with
any Standard Webhooks library. A 2xx answer delivers; anything else is retried per the
declaration's ``retry`` (:func:`backoff`), and after ``max_attempts`` the callback is ``failed``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc
import standardwebhooks

from dap.config import durations
from dap.config.actions import CallbackDecl, RetryDecl
from dap.server import errors

DEFAULT_HEADER = "X-Callback-Url"
REFUSED = "SVC.JOB.CALLBACK_REFUSED"
TIMEOUT = 10.0  # seconds one delivery may take
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def header_of(decl: CallbackDecl) -> str:
    return decl.header or DEFAULT_HEADER


def url_of(headers: Mapping[str, str], decl: CallbackDecl | None) -> str | None:
    """The callback URL a request names (``None``: no callback asked)."""
    if decl is None:
        return None
    value = headers.get(header_of(decl), "").strip()
    return value or None


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    """``--callback-allow`` values as networks; ``ValueError`` names a bad one."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"--callback-allow {value!r} is not a CIDR (e.g. 127.0.0.0/8): {exc}") from exc
    return tuple(out)


def _internal(address: Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _internal(address.ipv4_mapped)
    for name, flag in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("shared", address in ipaddress.ip_network("100.64.0.0/10")),
    ):
        if flag:
            return name
    return None


def refusal(addresses: Sequence[Address], allow: Sequence[Network]) -> str | None:
    """Why a callback to ``addresses`` is refused, ``None`` when it may go there. Pure."""
    if not addresses:
        return "its host resolves to no address"
    for address in addresses:
        kind = _internal(address)
        if kind is not None and not any(address in net for net in allow if net.version == address.version):
            return f"its host resolves to {address}, a {kind} address (allow it with --callback-allow)"
    return None


def split(url: str) -> tuple[str, int]:
    """Host and port of a callback URL; 422 when it is no http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refused(url, f"it is not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(url, "it must be an http:// or https:// URL with a host")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _refused(url: str, why: str) -> errors.ValidationFailed:
    return errors.ValidationFailed(f"the callback URL {url!r} is refused: {why}", code=REFUSED)


async def resolve(host: str, port: int) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


async def check(url: str, allow: Sequence[Network]) -> None:
    """422 ``SVC.JOB.CALLBACK_REFUSED`` unless ``url`` may receive a callback."""
    host, port = split(url)
    why = refusal(await resolve(host, port), allow)
    if why is not None:
        raise _refused(url, why)


def backoff(retry: RetryDecl, attempt: int) -> float | None:
    """Seconds to wait after failed delivery number ``attempt`` (1-based); ``None``: give up. Pure."""
    if attempt >= max(1, retry.max_attempts):
        return None
    first = durations.parse(retry.backoff).total_seconds()
    most = durations.parse(retry.max_backoff).total_seconds()
    return float(min(most, first * retry.multiplier ** (attempt - 1)))


def signed(secret: str, message_id: str, at: dt.datetime, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of ``body``."""
    hook = standardwebhooks.Webhook(secret)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": hook.sign(message_id, at, body),
    }


def valid_secret(secret: str) -> bool:
    try:
        standardwebhooks.Webhook(secret)
    except Exception:
        return False
    return True


class _Pinned(aiohttp.abc.AbstractResolver):
    """Answers with the addresses already checked, so the connection goes where the check said
    (a name cannot resolve to a public address for the check and an internal one for the POST)."""

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        return [
            {
                "hostname": host,
                "host": str(a),
                "port": port,
                "family": socket.AF_INET6 if a.version == 6 else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for a in self.addresses
        ]

    async def close(self) -> None:
        return None


async def send(url: str, body: str, headers: Mapping[str, str], allow: Sequence[Network]) -> str | None:
    """POST one callback to the addresses checked for it; ``None`` when delivered (2xx), else why not."""
    try:
        host, port = split(url)
    except errors.ValidationFailed as exc:
        return exc.detail
    addresses = await resolve(host, port)
    why = refusal(addresses, allow)
    if why is not None:
        return f"the callback URL is refused: {why}"
    connector = aiohttp.TCPConnector(resolver=_Pinned(addresses), use_dns_cache=False)
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                url,
                data=body.encode(),
                headers={"Content-Type": "application/json", **headers},
                timeout=aiohttp.ClientTimeout(total=TIMEOUT),
                allow_redirects=False,  # a redirect could lead past the address check
            ) as resp,
        ):
            if 200 <= resp.status < 300:
                return None
            return f"the receiver answered {resp.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return f"{exc.__class__.__name__}: {exc}"
