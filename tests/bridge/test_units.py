"""Pure parts of the bridge: endpoints, replies, health states, scopes, and the boot options."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from click.testing import CliRunner

from dap.bridge import cli, health, scopes, wire
from dap.server import errors, options


@pytest.mark.parametrize(
    ("text", "base", "socket"),
    [
        pytest.param("unix:///run/app.sock", "http://app", "/run/app.sock", id="unix"),
        pytest.param("unix:/run/app.sock", "http://app", "/run/app.sock", id="unix-short"),
        pytest.param("http://127.0.0.1:9000", "http://127.0.0.1:9000", None, id="http"),
    ],
)
def test_endpoints(text: str, base: str, socket: str | None) -> None:
    endpoint = wire.parse_endpoint(text)
    assert (endpoint.base, endpoint.socket) == (base, socket)


@pytest.mark.parametrize("text", ["unix://", "https://x:1", "http://x:1/path", "tcp://x:1", ""])
def test_bad_endpoints_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="unix:///"):
        wire.parse_endpoint(text)


def test_replies() -> None:
    reply = wire.parse_reply({"data": [1], "new_state": "", "events": [{"name": "a.b", "payload": {"x": 1}}]})
    assert reply.data == [1] and reply.new_state is None and reply.events[0].payload == {"x": 1}
    assert wire.parse_reply({}).events == ()
    for bad in (
        [],
        {"events": {}},
        {"events": [{"name": ""}]},
        {"new_state": 3},
        {"events": [{"name": "a", "payload": 1}]},
    ):
        with pytest.raises(wire.BadReplyError):
            wire.parse_reply(bad)
    assert wire.error_of({"error": "x" * 900}, "f") == "x" * 500
    assert wire.error_of(None, "fallback") == "fallback"


def test_health_degrades_after_three_failures_and_recovers() -> None:
    h = health.Health()
    h.record("refused")
    h.record("refused")
    assert not h.degraded and h.report()["status"] == "healthy"
    h.record("refused")
    assert h.degraded and h.report()["status"] == "degraded" and h.report()["reasons"]
    h.record(None)
    assert not h.degraded and h.failures == 0


async def test_scopes_refuse_after_close_and_expiry() -> None:
    registry = scopes.Scopes()
    conn: object = object()
    s = registry.open(
        conn, tenant=uuid.uuid4(), principal="p", username="u", entity="m/e", action="a", timeout=0.2
    )  # type: ignore[arg-type]
    assert registry.find(s.id, None) == (s, True)
    assert registry.find(None, s.invoke_id) == (s, False)
    assert registry.find(s.id, s.invoke_id)[1]
    other = registry.open(
        conn, tenant=uuid.uuid4(), principal="p", username="u", entity="m/e", action="a", timeout=5
    )  # type: ignore[arg-type]
    with pytest.raises(errors.Forbidden, match="another invoke"):
        registry.find(s.id, other.invoke_id)
    await asyncio.sleep(0.25)
    with pytest.raises(errors.Forbidden, match="expired"):
        registry.find(s.id, None)
    await registry.close(other)
    with pytest.raises(errors.Forbidden, match="unknown"):
        registry.find(other.id, None)
    with pytest.raises(errors.Unauthorized):
        registry.find(None, None)
    assert len(s.id) >= 43 and s.id != s.invoke_id


def raw(**kw: object) -> dict[str, object]:
    return {"dsn": "postgresql://x/y", "jwt_secret": "s" * 40, "cors_origins": ["http://a"], **kw}


def test_boot_options() -> None:
    opts = options.check(**raw(sidecar_endpoint="unix:///tmp/a.sock", invoke_timeout="500ms"))  # type: ignore[arg-type]
    assert opts.sidecar_endpoint == "unix:///tmp/a.sock" and opts.invoke_timeout == 0.5
    assert opts.ctx_listen == "127.0.0.1:0"
    for bad, message in (
        ({"sidecar_endpoint": "ftp://x"}, "--sidecar-endpoint"),
        ({"invoke_timeout": "0s"}, "--invoke-timeout"),
        ({"ctx_listen": "0.0.0.0:9000"}, "--ctx-listen"),
    ):
        with pytest.raises(errors.BootRefused, match=message):
            options.check(**raw(**bad))  # type: ignore[arg-type]
    assert options.check(**raw(ctx_listen="unix:///tmp/ctx.sock")).ctx_listen == "unix:///tmp/ctx.sock"  # type: ignore[arg-type]


def test_dap_bridge_says_it_is_deprecated() -> None:
    result = CliRunner().invoke(cli.bridge, ["--listen", "unix:///x"])
    assert result.exit_code == 2 and "deprecated" in result.output
