"""Datastores and ResourceClaims end to end: the real kopf operator on kmock's emulator,
real ed25519 signatures."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from dap.operator import claims
from tests.operator.conftest import Api, StartOperator, wait_for

NS = "tenants"
PRIVATE, PUBLIC = claims.keygen()


def secret(name: str = "orders-endpoint", **data: str) -> dict[str, Any]:
    encoded = {
        k: base64.b64encode(v.encode()).decode()
        for k, v in (data or {"host": "db", "password": "pw"}).items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": encoded,
    }


def datastore(allowed: list[str] | None = None, public: str = PUBLIC) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Datastore",
        "metadata": {"name": "orders", "namespace": NS},
        "spec": {
            "driver": "postgres",
            "endpointSecretRef": {"name": "orders-endpoint"},
            "allowedTenants": ["shop"] if allowed is None else allowed,
            "owner": "alice",
            "ownerPublicKey": public,
        },
    }


def claim(name: str = "shop-orders", workspace: str = "shop", signature: str | None = None) -> dict[str, Any]:
    grant = claims.Grant("orders", workspace, "read_write", "alice", "2026-01-02T03:04:05Z")
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "datastore": grant.datastore,
            "workspace": grant.workspace,
            "permission": grant.permission,
            "grantedBy": grant.granted_by,
            "grantedAt": grant.granted_at,
            "signature": signature or claims.sign(grant, PRIVATE),
        },
    }


def workspace(name: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NS},
        "spec": {},
    }


def status(api: Api, plural: str, name: str) -> dict[str, Any]:
    obj = api.get(plural, NS, name) or {}
    result: dict[str, Any] = obj.get("status", {})
    return result


def condition(api: Api, plural: str, name: str, type_: str) -> dict[str, Any] | None:
    return next((c for c in status(api, plural, name).get("conditions", []) if c["type"] == type_), None)


def env_from(api: Api, ws: str = "shop") -> list[dict[str, Any]]:
    dep = api.get("deployments", NS, f"dap-{ws}") or {}
    result: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    return result


CLAIM_SECRET_REF = {"prefix": "DAP_DATASTORE_ORDERS_", "secretRef": {"name": "dap-claim-shop-orders"}}


async def test_datastore_is_denied_until_its_secret_appears(api: Api, start_operator: StartOperator) -> None:
    await start_operator()
    await api.create("datastores", datastore())
    await wait_for(lambda: status(api, "datastores", "orders").get("phase") == "Denied", what="Denied")
    denied = condition(api, "datastores", "orders", "Denied")
    assert denied is not None
    assert denied["status"] == "True"
    assert denied["reason"] == "SecretMissing"
    assert "orders-endpoint" in denied["message"]

    await api.create("secrets", secret())
    await wait_for(lambda: status(api, "datastores", "orders").get("phase") == "Validated", what="Validated")
    validated = condition(api, "datastores", "orders", "Validated")
    assert validated is not None
    assert validated["status"] == "True"


async def test_valid_claim_injects_credentials_and_deleting_it_removes_them(
    api: Api, start_operator: StartOperator
) -> None:
    await api.create("secrets", secret())
    await api.create("datastores", datastore())
    await start_operator()
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    assert CLAIM_SECRET_REF not in env_from(api)

    await api.create("resourceclaims", claim())
    await wait_for(
        lambda: status(api, "resourceclaims", "shop-orders").get("phase") == "Ready", what="claim Ready"
    )
    ready = condition(api, "resourceclaims", "shop-orders", "Ready")
    assert ready is not None
    assert ready["status"] == "True"
    creds = api.get("secrets", NS, "dap-claim-shop-orders")
    assert creds is not None
    assert base64.b64decode(creds["data"]["PASSWORD"]) == b"pw"
    assert base64.b64decode(creds["data"]["PERMISSION"]) == b"read_write"
    assert creds["metadata"]["ownerReferences"][0]["kind"] == "ResourceClaim"
    await wait_for(lambda: CLAIM_SECRET_REF in env_from(api), what="credentials injected")

    await api.delete("resourceclaims", NS, "shop-orders")
    await wait_for(
        lambda: api.get("secrets", NS, "dap-claim-shop-orders") is None, what="claim Secret deleted"
    )
    await wait_for(lambda: CLAIM_SECRET_REF not in env_from(api), what="credentials removed")
    assert api.get("secrets", NS, "orders-endpoint") is not None  # the datastore's own Secret stays


@pytest.mark.parametrize(
    ("store", "the_claim", "reason"),
    [
        pytest.param(datastore(), claim(signature="ab" * 64), "InvalidSignature", id="bad-signature"),
        pytest.param(datastore(public=claims.keygen()[1]), claim(), "InvalidSignature", id="other-owner-key"),
        pytest.param(
            datastore(allowed=["someone-else"]), claim(), "TenantNotAllowed", id="tenant-not-allowed"
        ),
    ],
)
async def test_denied_claims_inject_nothing(
    api: Api, start_operator: StartOperator, store: dict[str, Any], the_claim: dict[str, Any], reason: str
) -> None:
    await api.create("secrets", secret())
    await api.create("datastores", store)
    await start_operator()
    await api.create("workspaces", workspace())
    await api.create("resourceclaims", the_claim)
    await wait_for(
        lambda: status(api, "resourceclaims", "shop-orders").get("phase") == "Denied", what="Denied"
    )
    denied = condition(api, "resourceclaims", "shop-orders", "Denied")
    ready = condition(api, "resourceclaims", "shop-orders", "Ready")
    assert denied is not None
    assert ready is not None
    assert (denied["status"], denied["reason"]) == ("True", reason)
    assert ready["status"] == "False"
    assert api.get("secrets", NS, "dap-claim-shop-orders") is None
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    assert all("secretRef" not in source for source in env_from(api))


async def test_claim_waits_for_the_datastore_secret_then_becomes_ready(
    api: Api, start_operator: StartOperator
) -> None:
    await api.create("datastores", datastore())
    await start_operator()
    await api.create("workspaces", workspace())
    await api.create("resourceclaims", claim())
    await wait_for(
        lambda: status(api, "resourceclaims", "shop-orders").get("phase") == "Pending", what="Pending"
    )
    await api.create("secrets", secret())
    await wait_for(lambda: status(api, "resourceclaims", "shop-orders").get("phase") == "Ready", what="Ready")
    await wait_for(lambda: CLAIM_SECRET_REF in env_from(api), what="credentials injected")


async def test_insecure_skip_signature_verify_accepts_unsigned_claims(
    api: Api, start_operator: StartOperator
) -> None:
    await api.create("secrets", secret())
    await api.create("datastores", datastore())
    await start_operator(insecure_skip_signature_verify=True)
    await api.create("resourceclaims", claim(signature="00" * 64))
    await wait_for(lambda: status(api, "resourceclaims", "shop-orders").get("phase") == "Ready", what="Ready")
    ready = condition(api, "resourceclaims", "shop-orders", "Ready")
    assert ready is not None
    assert "NOT verified" in ready["message"]


async def test_rotating_the_endpoint_secret_updates_the_credentials_and_rolls_the_pods(
    api: Api, start_operator: StartOperator
) -> None:
    await api.create("secrets", secret(password="old"))
    await api.create("datastores", datastore())
    await start_operator()
    await api.create("workspaces", workspace())
    await api.create("resourceclaims", claim())
    await wait_for(lambda: CLAIM_SECRET_REF in env_from(api), what="credentials injected")

    def rollout_hash() -> str | None:
        dep = api.get("deployments", NS, "dap-shop") or {}
        value: str | None = dep["spec"]["template"]["metadata"]["annotations"].get("dap.io/credentials-hash")
        return value

    before = await wait_for(rollout_hash, what="credentials hash")
    new = base64.b64encode(b"new").decode()
    await api.patch("secrets", NS, "orders-endpoint", {"data": {"password": new}})
    await wait_for(
        lambda: (api.get("secrets", NS, "dap-claim-shop-orders") or {})["data"]["PASSWORD"] == new,
        what="claim Secret updated",
    )
    await wait_for(lambda: rollout_hash() not in (None, before), what="pod template rolled")
