"""Datastores and ResourceClaims on a real API server, with real ed25519 signatures: validation
by the endpoint Secret, credentials injected into and removed from the Deployment, the claim's
Secret collected with its claim while the datastore's own Secret stays."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from dap.operator import claims
from tests.kube import objects
from tests.kube.client import Api, wait_for
from tests.kube.conftest import Operators
from tests.kube.objects import claim, condition, datastore, phase, secret, workspace

CLAIM_SECRET_REF = {"prefix": "DAP_DATASTORE_ORDERS_", "secretRef": {"name": "dap-claim-shop-orders"}}


async def env_from(api: Api, ns: str) -> list[dict[str, Any]]:
    dep = await api.get("deployments", ns, "dap-shop") or {}
    result: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    return result


def is_phase(api: Api, plural: str, ns: str, name: str, want: str) -> Any:
    async def probe() -> bool:
        return await phase(api, plural, ns, name) == want

    return probe


async def test_datastore_is_denied_until_its_secret_appears(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("datastores", datastore(ns))
    await wait_for(is_phase(api, "datastores", ns, "orders", "Denied"), what="Denied")
    denied = await condition(api, "datastores", ns, "orders", "Denied")
    assert denied is not None
    assert (denied["status"], denied["reason"]) == ("True", "SecretMissing")
    assert "orders-endpoint" in denied["message"]

    await api.create("secrets", secret(ns))
    await wait_for(is_phase(api, "datastores", ns, "orders", "Validated"), what="Validated")
    validated = await condition(api, "datastores", ns, "orders", "Validated")
    assert validated is not None
    assert validated["status"] == "True"


async def test_valid_claim_injects_credentials_and_deleting_it_removes_them(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("secrets", secret(ns))
    await api.create("datastores", datastore(ns))
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await wait_for(lambda: api.get("deployments", ns, "dap-shop"))
    assert CLAIM_SECRET_REF not in await env_from(api, ns)

    made = await api.create("resourceclaims", claim(ns))
    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Ready"), what="claim Ready")
    creds = await api.get("secrets", ns, "dap-claim-shop-orders")
    assert creds is not None
    assert base64.b64decode(creds["data"]["PASSWORD"]) == b"pw"
    assert base64.b64decode(creds["data"]["PERMISSION"]) == b"read_write"
    owner = creds["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("ResourceClaim", made["metadata"]["uid"])
    status = await objects.status(api, "resourceclaims", ns, "shop-orders")
    assert status["secretName"] == "dap-claim-shop-orders"

    async def injected() -> bool:
        return CLAIM_SECRET_REF in await env_from(api, ns)

    await wait_for(injected, what="credentials injected")

    await api.delete("resourceclaims", ns, "shop-orders")

    async def secret_gone() -> bool:
        return await api.get("secrets", ns, "dap-claim-shop-orders") is None

    async def removed() -> bool:
        return CLAIM_SECRET_REF not in await env_from(api, ns)

    await wait_for(secret_gone, what="claim Secret deleted")
    await wait_for(removed, what="credentials removed")
    assert await api.get("secrets", ns, "orders-endpoint") is not None  # the datastore's own Secret stays


@pytest.mark.parametrize(
    ("store", "bad_signature", "reason"),
    [
        pytest.param({}, True, "InvalidSignature", id="bad-signature"),
        pytest.param({"public": claims.keygen()[1]}, False, "InvalidSignature", id="other-owner-key"),
        pytest.param({"allowed": ["someone-else"]}, False, "TenantNotAllowed", id="tenant-not-allowed"),
    ],
)
async def test_denied_claims_inject_nothing(
    api: Api, ns: str, start_operator: Operators, store: dict[str, Any], bad_signature: bool, reason: str
) -> None:
    await api.create("secrets", secret(ns))
    await api.create("datastores", datastore(ns, **store))
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await api.create("resourceclaims", claim(ns, signature="ab" * 64 if bad_signature else None))
    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Denied"), what="Denied")
    denied = await condition(api, "resourceclaims", ns, "shop-orders", "Denied")
    ready = await condition(api, "resourceclaims", ns, "shop-orders", "Ready")
    assert denied is not None
    assert ready is not None
    assert (denied["status"], denied["reason"]) == ("True", reason)
    assert ready["status"] == "False"
    assert await api.get("secrets", ns, "dap-claim-shop-orders") is None
    await wait_for(lambda: api.get("deployments", ns, "dap-shop"))
    assert all("secretRef" not in source for source in await env_from(api, ns))


async def test_claim_waits_for_the_datastore_secret_then_becomes_ready(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("datastores", datastore(ns))
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await api.create("resourceclaims", claim(ns))
    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Pending"), what="Pending")
    await api.create("secrets", secret(ns))
    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Ready"), what="Ready")

    async def injected() -> bool:
        return CLAIM_SECRET_REF in await env_from(api, ns)

    await wait_for(injected, what="credentials injected")


async def test_rotating_the_endpoint_secret_updates_the_credentials_and_rolls_the_pods(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("secrets", secret(ns, password="old"))
    await api.create("datastores", datastore(ns))
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await api.create("resourceclaims", claim(ns))

    async def rollout_hash() -> str | None:
        dep = await api.get("deployments", ns, "dap-shop") or {}
        value: str | None = dep["spec"]["template"]["metadata"]["annotations"].get("dap.io/credentials-hash")
        return value

    before = await wait_for(rollout_hash, what="credentials hash")
    new = base64.b64encode(b"new").decode()
    await api.patch("secrets", ns, "orders-endpoint", {"data": {"password": new}})

    async def updated() -> bool:
        return bool(
            ((await api.get("secrets", ns, "dap-claim-shop-orders")) or {})["data"]["PASSWORD"] == new
        )

    async def rolled() -> bool:
        return (await rollout_hash()) not in (None, before)

    await wait_for(updated, what="claim Secret updated")
    await wait_for(rolled, what="pod template rolled")


async def test_insecure_skip_signature_verify_accepts_unsigned_claims(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("secrets", secret(ns))
    await api.create("datastores", datastore(ns))
    await start_operator(insecure_skip_signature_verify=True)
    await api.create("resourceclaims", claim(ns, signature="00" * 64))
    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Ready"), what="Ready")
    ready = await condition(api, "resourceclaims", ns, "shop-orders", "Ready")
    assert ready is not None
    assert "NOT verified" in ready["message"]


async def test_dev_auto_grant_grants_an_unsigned_claim_on_a_local_datastore_only(
    api: Api, ns: str, start_operator: Operators, caplog: pytest.LogCaptureFixture
) -> None:
    """``--dev-auto-grant-claims``: an unsigned claim on a sqlite Datastore of its own namespace is
    Ready at once, says so in its condition, the log and the metric; on a postgres one, denied."""
    await api.create("secrets", secret(ns))
    await api.create("secrets", secret(ns, name="files-endpoint", path="/data/files.db"))
    await api.create("datastores", datastore(ns))  # postgres: not local
    files = datastore(ns)
    files["metadata"]["name"] = "files"
    files["spec"].update(driver="sqlite", endpointSecretRef={"name": "files-endpoint"})
    await api.create("datastores", files)
    runtime = await start_operator(dev_auto_grant_claims=True)
    await api.create("workspaces", workspace(ns))
    for name, store in (("shop-files", "files"), ("shop-orders", "orders")):
        body = claim(ns, name=name)
        body["spec"]["datastore"] = store
        del body["spec"]["signature"]  # unsigned: the CRD accepts it, the operator judges it
        await api.create("resourceclaims", body)

    await wait_for(is_phase(api, "resourceclaims", ns, "shop-files", "Ready"), what="local claim Ready")
    ready = await condition(api, "resourceclaims", ns, "shop-files", "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("True", claims.AUTO_GRANTED)
    assert "auto-granted in dev mode" in ready["message"]
    creds = await api.get("secrets", ns, "dap-claim-shop-files")
    assert creds is not None
    assert base64.b64decode(creds["data"]["PATH"]) == b"/data/files.db"
    assert base64.b64decode(creds["data"]["DRIVER"]) == b"sqlite"

    await wait_for(is_phase(api, "resourceclaims", ns, "shop-orders", "Denied"), what="postgres claim Denied")
    denied = await condition(api, "resourceclaims", ns, "shop-orders", "Denied")
    assert denied is not None
    assert (denied["status"], denied["reason"]) == ("True", "InvalidSignature")
    assert "not signed" in denied["message"]
    assert await api.get("secrets", ns, "dap-claim-shop-orders") is None

    audits = [r for r in caplog.records if getattr(r, "ctx", {}).get("audit") == "dev_auto_grant"]
    assert [r.ctx["claim"] for r in audits] == [f"{ns}/shop-files"]  # type: ignore[attr-defined]
    assert runtime.metrics.registry.get_sample_value("dap_claims_dev_auto_granted_total") == 1.0
