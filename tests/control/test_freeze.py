"""Change freezes: the pure rules (``freezes.desired``) and ``dap control freeze`` on a real control."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from dap.control import errors
from dap.control.supply import freezes
from tests.control.conftest import Start
from tests.control.test_cli import run
from tests.control.test_tlog import get, register

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def freeze(fid: str, scope: str, target: str, *, age: int = 0, **extra: object) -> freezes.Freeze:
    values: dict[str, object] = {
        "created_at": NOW - timedelta(minutes=10 + age),
        "ends_at": NOW + timedelta(hours=1),
        **extra,
    }
    return freezes.Freeze(fid, scope, target, "because", **values)  # type: ignore[arg-type]


BINDINGS = [
    freezes.Binding("acme", "shop", "c1", "art-new", "n" * 64),
    freezes.Binding("beta", "shop", "c1", "art-new", "n" * 64),
    freezes.Binding("gamma", "blog", None, "art-blog", "b" * 64),
]


def deployed(fs: list[freezes.Freeze], holds: dict[tuple[str, str], freezes.Hold]) -> dict[str, str]:
    return {
        d["workspace_id"]: d["artifact_id"]
        for d in freezes.desired(BINDINGS, fs, holds, environment="prod", now=NOW)
    }


def test_holds_new_bindings_revocations_and_the_oldest_freeze() -> None:
    old = freezes.Hold("art-old", "o" * 64, True)
    assert deployed([], {}) == {"acme": "art-new", "beta": "art-new", "gamma": "art-blog"}
    # acme was held at the old artifact; beta was bound during the freeze: not deployed yet
    assert deployed([freeze("f1", "app", "shop")], {("f1", "acme"): old}) == {
        "acme": "art-old",
        "gamma": "art-blog",
    }
    # a revoked hold is not kept: the current artifact (the revocation's fallback) is served
    revoked = freezes.Hold("art-old", "o" * 64, False)
    assert deployed([freeze("f1", "workspace", "acme")], {("f1", "acme"): revoked})["acme"] == "art-new"
    # an environment freeze covers everything of that environment only
    env = [freeze("f2", "environment", "prod")]
    assert deployed(env, {("f2", "acme"): old, ("f2", "gamma"): old}) == {
        "acme": "art-old",
        "gamma": "art-old",
    }
    assert deployed([freeze("f3", "environment", "staging")], {}) == {
        "acme": "art-new",
        "beta": "art-new",
        "gamma": "art-blog",
    }
    # the oldest active freeze's hold wins; lifted and ended ones do nothing
    older = freezes.Hold("art-older", "p" * 64, True)
    both = [freeze("young", "workspace", "acme"), freeze("old", "app", "shop", age=5)]
    assert deployed(both, {("young", "acme"): old, ("old", "acme"): older})["acme"] == "art-older"
    over = [
        freeze("lifted", "app", "shop", lifted_at=NOW - timedelta(minutes=1)),
        freeze("ended", "app", "shop", ends_at=NOW),
    ]
    assert deployed(over, {("lifted", "acme"): old, ("ended", "acme"): old})["acme"] == "art-new"


def test_scope_and_end_are_checked() -> None:
    assert freezes.check_scope("shop", None, None) == ("app", "shop")
    for bad in ((None, None, None), ("shop", "acme", None)):
        with pytest.raises(errors.RequestError):
            freezes.check_scope(*bad)
    assert freezes.parse_duration("1h30m") == timedelta(minutes=90)
    for text in ("", "5", "1x", "h1", "1h 30m"):
        with pytest.raises(errors.RequestError):
            freezes.parse_duration(text)
    assert freezes.ends_at(now=NOW, until=None, duration="2h") == NOW + timedelta(hours=2)
    with pytest.raises(errors.RequestError, match="not in the future"):
        freezes.ends_at(now=NOW, until=NOW - timedelta(seconds=1), duration=None)
    with pytest.raises(errors.RequestError, match="exactly one"):
        freezes.ends_at(now=NOW, until=NOW + timedelta(hours=1), duration="1h")


async def deployed_now(http: aiohttp.ClientSession, url: str) -> list[str]:
    _, body = await get(http, f"{url}/v1/snapshot", workspace="acme")
    return [d["artifact_id"] for d in body["deployments"]]


async def eventually_deployed(http: aiohttp.ClientSession, url: str, artifact_id: str) -> None:
    for _ in range(200):
        if await deployed_now(http, url) == [artifact_id]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{artifact_id} never deployed; snapshot names {await deployed_now(http, url)}")


async def test_freeze_holds_deployment_not_registration_and_lift_releases(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control(freeze_check_interval=0.2)
    v1 = await register(http, control.url, "shop")
    code, out, err = await run(
        "control", "freeze", "set", "--app", "shop", "--for", "1h", "--reason", "launch week", "--db", db_dsn
    )
    assert code == 0, err
    frozen = json.loads(out)
    assert frozen["scope"] == "app" and frozen["active"] and frozen["reason"] == "launch week"
    v2 = await register(http, control.url, "shop", **{"v2.txt": b"2"})
    assert v2["created"]
    await asyncio.sleep(0.5)  # the NOTIFY of the registration has been handled
    assert await deployed_now(http, control.url) == [v1["artifact_id"]]
    _, entries = await get(http, f"{control.url}/v1/log/entries", app="shop")
    kinds = [(e["entry"]["type"], e["entry"].get("artifact_id")) for e in entries["entries"]]
    assert ("register", v2["artifact_id"]) in kinds and ("freeze", None) in kinds  # logged all the same
    code, out, _ = await run("control", "freeze", "list", "--db", db_dsn)
    assert [json.loads(line)["freeze_id"] for line in out.splitlines()] == [frozen["freeze_id"]]

    code, out, err = await run("control", "freeze", "lift", frozen["freeze_id"], "--db", db_dsn)
    assert code == 0, err
    assert json.loads(out)["active"] is False
    await eventually_deployed(http, control.url, v2["artifact_id"])
    code, _, err = await run("control", "freeze", "lift", frozen["freeze_id"], "--db", db_dsn)
    assert code == 1 and "already lifted" in err
    code, out, _ = await run("control", "freeze", "list", "--db", db_dsn)
    assert out == ""
    code, out, _ = await run("control", "freeze", "list", "--all", "--db", db_dsn)
    assert len(out.splitlines()) == 1

    # a freeze that ends by itself
    code, out, err = await run(
        "control", "freeze", "set", "--workspace", "acme", "--for", "2s", "--reason", "short", "--db", db_dsn
    )
    assert code == 0, err
    v3 = await register(http, control.url, "shop", **{"v3.txt": b"3"})
    await asyncio.sleep(0.5)
    assert await deployed_now(http, control.url) == [v2["artifact_id"]]
    await asyncio.sleep(1.5)
    await eventually_deployed(http, control.url, v3["artifact_id"])


async def test_bad_freezes_are_refused_and_store_nothing(start_control: Start, db_dsn: str) -> None:
    await start_control()
    for args, message in (
        (("--app", "shop", "--workspace", "acme", "--for", "1h"), "exactly one scope"),
        (("--app", "shop"), "exactly one of --until"),
        (("--app", "shop", "--for", "0s"), "not in the future"),
        (("--app", "shop", "--for", "soon"), "invalid duration"),
        (("--app", "shop", "--until", "2001-01-01T00:00:00Z"), "not in the future"),
    ):
        code, _, err = await run("control", "freeze", "set", *args, "--reason", "r", "--db", db_dsn)
        assert code == 1, args
        assert message in err, err
    code, _, err = await run("control", "freeze", "lift", "frz-nope", "--db", db_dsn)
    assert code == 1 and "does not exist" in err
    code, out, _ = await run("control", "freeze", "list", "--all", "--db", db_dsn)
    assert code == 0 and out == ""
