"""Claim signatures (real ed25519 via PyNaCl) and the claim verdict (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from dap.operator import bodies, claims

PRIVATE, PUBLIC = claims.keygen()
GRANT = claims.Grant("orders", "shop", "read_write", "alice", "2026-01-02T03:04:05Z")


def claim_body(grant: claims.Grant = GRANT, signature: str | None = None) -> bodies.ResourceClaimBody:
    return {
        "metadata": {"name": "c", "namespace": "tenants"},
        "spec": {
            "datastore": grant.datastore,
            "workspace": grant.workspace,
            "permission": grant.permission,
            "grantedBy": grant.granted_by,
            "grantedAt": grant.granted_at,
            "signature": signature if signature is not None else claims.sign(grant, PRIVATE),
        },
    }


def datastore(public: str = PUBLIC, allowed: list[str] | None = None) -> bodies.DatastoreBody:
    return {
        "metadata": {"name": "orders", "namespace": "tenants"},
        "spec": {
            "driver": "postgres",
            "endpointSecretRef": {"name": "orders-endpoint"},
            "ownerPublicKey": public,
            "allowedTenants": ["shop"] if allowed is None else allowed,
        },
    }


def test_message_is_the_five_fields_joined_by_a_bar() -> None:
    assert claims.message(GRANT) == b"orders|shop|read_write|alice|2026-01-02T03:04:05Z"


def test_a_bar_inside_a_field_is_refused() -> None:
    with pytest.raises(ValueError, match="must not contain"):
        claims.message(dataclasses.replace(GRANT, workspace="a|b"))


def test_sign_then_verify() -> None:
    signature = claims.sign(GRANT, PRIVATE)
    assert len(signature) == 128
    assert claims.verify(GRANT, signature, PUBLIC)
    assert claims.public_key(PRIVATE) == PUBLIC


@pytest.mark.parametrize(
    "field",
    [pytest.param(f.name, id=f.name) for f in dataclasses.fields(claims.Grant)],
)
def test_changing_any_signed_field_breaks_the_signature(field: str) -> None:
    signature = claims.sign(GRANT, PRIVATE)
    tampered = dataclasses.replace(GRANT, **{field: getattr(GRANT, field) + "x"})
    assert not claims.verify(tampered, signature, PUBLIC)


def test_another_key_does_not_verify() -> None:
    _, other_public = claims.keygen()
    assert not claims.verify(GRANT, claims.sign(GRANT, PRIVATE), other_public)
    assert not claims.verify(GRANT, "zz", PUBLIC)  # not hex: False, not an exception


@pytest.mark.parametrize(
    ("claim", "store", "secret_exists", "phase", "reason"),
    [
        pytest.param(claim_body(), datastore(), True, "Ready", "Granted", id="valid"),
        pytest.param(
            claim_body(signature="00" * 64),
            datastore(),
            True,
            "Denied",
            "InvalidSignature",
            id="bad-signature",
        ),
        pytest.param(
            claim_body(),
            datastore(public=claims.keygen()[1]),
            True,
            "Denied",
            "InvalidSignature",
            id="wrong-owner-key",
        ),
        pytest.param(
            claim_body(),
            datastore(allowed=["other"]),
            True,
            "Denied",
            "TenantNotAllowed",
            id="tenant-not-allowed",
        ),
        pytest.param(
            claim_body(),
            datastore(allowed=["tenants/shop"]),
            True,
            "Ready",
            "Granted",
            id="namespaced-tenant",
        ),
        pytest.param(
            claim_body(),
            datastore(allowed=["elsewhere/shop"]),
            True,
            "Denied",
            "TenantNotAllowed",
            id="other-namespace",
        ),
        pytest.param(claim_body(), None, True, "Pending", "DatastoreNotFound", id="no-datastore"),
        pytest.param(claim_body(), datastore(), False, "Pending", "DatastoreNotValidated", id="no-secret"),
    ],
)
def test_evaluate(
    claim: bodies.ResourceClaimBody,
    store: bodies.DatastoreBody | None,
    secret_exists: bool,
    phase: str,
    reason: str,
) -> None:
    verdict = claims.evaluate(claim, store, secret_exists=secret_exists)
    assert verdict.phase == phase
    assert verdict.condition("Ready").reason == reason
    assert (verdict.condition("Denied").status == "True") == (phase == "Denied")
    assert (verdict.condition("Ready").status == "True") == (phase == "Ready")


def test_skip_signature_accepts_a_bad_signature_but_still_checks_tenants() -> None:
    ok = claims.evaluate(
        claim_body(signature="00" * 64), datastore(), secret_exists=True, skip_signature=True
    )
    assert ok.phase == "Ready"
    assert "NOT verified" in ok.condition("Ready").message
    denied = claims.evaluate(claim_body(), datastore(allowed=[]), secret_exists=True, skip_signature=True)
    assert denied.phase == "Denied"


@pytest.mark.parametrize(
    ("namespace", "ref", "key"),
    [
        pytest.param("tenants", "orders", ("tenants", "orders"), id="same-namespace"),
        pytest.param("tenants", "stores/orders", ("stores", "orders"), id="qualified"),
    ],
)
def test_datastore_key(namespace: str, ref: str, key: tuple[str, str]) -> None:
    assert claims.datastore_key(namespace, ref) == key
