"""The pure parts of jobs and callbacks: which callback addresses are refused, the retry backoff,
the callback header, and the boot options that configure them."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os

import pytest
import standardwebhooks

from dap.config.actions import CallbackDecl, RetryDecl
from dap.server import errors
from dap.server.workflows import callbacks

from .conftest import serve_options

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.2.3.4", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
    ],
)
def test_internal_addresses_are_refused(address: str, kind: str) -> None:
    why = callbacks.refusal([ip(address)], ())
    assert why is not None and kind in why and "--callback-allow" in why


def test_public_addresses_and_allow_listed_networks_pass() -> None:
    assert callbacks.refusal([ip("93.184.216.34"), ip("2606:2800:220:1::")], ()) is None
    allow = callbacks.parse_networks(["127.0.0.0/8", "10.1.0.0/16"])
    assert callbacks.refusal([ip("127.0.0.1")], allow) is None
    assert callbacks.refusal([ip("10.1.9.9")], allow) is None
    assert callbacks.refusal([ip("10.2.0.1")], allow) is not None  # outside the allowed /16
    assert callbacks.refusal([ip("93.184.216.34"), ip("10.2.0.1")], allow) is not None  # every address counts
    assert callbacks.refusal([], allow) == "its host resolves to no address"
    with pytest.raises(ValueError, match="not a CIDR"):
        callbacks.parse_networks(["nope"])


def test_urls_must_be_http_with_a_host() -> None:
    assert callbacks.split("https://hooks.example/x") == ("hooks.example", 443)
    assert callbacks.split("http://[::1]:81/") == ("::1", 81)
    for bad in ("ftp://x/y", "http:///nohost", "mailto:a@b", "http://x:99999/"):
        with pytest.raises(errors.ValidationFailed):
            callbacks.split(bad)


def test_backoff_grows_to_its_cap_and_stops_after_max_attempts() -> None:
    retry = RetryDecl(max_attempts=5, backoff="1s", max_backoff="3s", multiplier=2)
    assert [callbacks.backoff(retry, n) for n in range(1, 6)] == [1.0, 2.0, 3.0, 3.0, None]
    assert callbacks.backoff(RetryDecl(max_attempts=0), 1) is None  # one attempt, no retry


def test_the_header_comes_from_the_declaration() -> None:
    decl = CallbackDecl(channel="webhook", header="X-Reply-To")
    assert callbacks.url_of({"X-Reply-To": " https://a.example/ "}, decl) == "https://a.example/"
    assert callbacks.url_of({}, decl) is None
    assert callbacks.url_of({"X-Callback-Url": "https://a.example/"}, CallbackDecl(channel="webhook"))
    assert callbacks.url_of({"X-Callback-Url": "https://a.example/"}, None) is None


def test_signatures_are_standard_webhooks() -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    now = dt.datetime.now(dt.UTC)
    headers = callbacks.signed(secret, "msg_1", now, '{"a":1}')
    assert standardwebhooks.Webhook(secret).verify('{"a":1}', headers) == {"a": 1}
    assert callbacks.valid_secret(secret) and not callbacks.valid_secret("")


def test_boot_options_of_jobs_and_callbacks() -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    opts = serve_options("postgresql://x/y", callback_allow=["127.0.0.0/8", " "], callback_secret=secret)
    assert (
        opts.callback_allow == ("127.0.0.0/8",) and opts.callback_secret == secret and opts.job_lease == 30.0
    )
    with pytest.raises(errors.BootRefused, match="--callback-allow"):
        serve_options("postgresql://x/y", callback_allow=["localhost"])
    with pytest.raises(errors.BootRefused, match="--callback-secret"):
        serve_options("postgresql://x/y", callback_secret="hunter2")
    with pytest.raises(errors.BootRefused, match="--job-lease"):
        serve_options("postgresql://x/y", job_lease="0s")
