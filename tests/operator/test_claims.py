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


# -- dev mode: --dev-auto-grant-claims ---------------------------------------------------------


def unsigned() -> bodies.ResourceClaimBody:
    body = claim_body()
    del body["spec"]["signature"]
    return body


def store_of(
    driver: str, namespace: str = "tenants", allowed: list[str] | None = None
) -> bodies.DatastoreBody:
    body = datastore(allowed=allowed)
    body["metadata"]["namespace"] = namespace
    body["spec"]["driver"] = driver
    return body


def elsewhere(body: bodies.ResourceClaimBody) -> bodies.ResourceClaimBody:
    body["spec"]["datastore"] = "stores/orders"
    return body


@pytest.mark.parametrize(
    ("claim", "store", "secret_exists", "auto", "phase", "reason"),
    [
        # local (same namespace, embedded driver): unsigned or badly signed is granted at once
        pytest.param(
            unsigned(), store_of("sqlite"), True, True, "Ready", claims.AUTO_GRANTED, id="unsigned-sqlite"
        ),
        pytest.param(
            unsigned(), store_of("memory"), True, True, "Ready", claims.AUTO_GRANTED, id="unsigned-memory"
        ),
        pytest.param(unsigned(), store_of("fs"), True, True, "Ready", claims.AUTO_GRANTED, id="unsigned-fs"),
        pytest.param(
            claim_body(signature="00" * 64),
            store_of("sqlite"),
            True,
            True,
            "Ready",
            claims.AUTO_GRANTED,
            id="bad-signature-local",
        ),
        # a valid signature is an ordinary grant, dev mode or not
        pytest.param(claim_body(), store_of("sqlite"), True, True, "Ready", "Granted", id="signed-local"),
        # still subject to allowedTenants and the endpoint Secret
        pytest.param(
            unsigned(),
            store_of("sqlite", allowed=["other"]),
            True,
            True,
            "Denied",
            "TenantNotAllowed",
            id="local-tenant-not-allowed",
        ),
        pytest.param(
            unsigned(),
            store_of("sqlite"),
            False,
            True,
            "Pending",
            "DatastoreNotValidated",
            id="local-no-secret",
        ),
        pytest.param(unsigned(), None, True, True, "Pending", "DatastoreNotFound", id="no-datastore"),
        # not local: a server driver, or another namespace's datastore, is judged as in production
        pytest.param(
            unsigned(), store_of("postgres"), True, True, "Denied", "InvalidSignature", id="postgres"
        ),
        pytest.param(unsigned(), store_of("valkey"), True, True, "Denied", "InvalidSignature", id="valkey"),
        pytest.param(
            elsewhere(unsigned()),
            store_of("sqlite", namespace="stores"),
            True,
            True,
            "Denied",
            "InvalidSignature",
            id="other-namespace-sqlite",
        ),
        # without the option nothing changes
        pytest.param(
            unsigned(), store_of("sqlite"), True, False, "Denied", "InvalidSignature", id="off-unsigned"
        ),
        pytest.param(
            claim_body(signature="00" * 64),
            store_of("memory"),
            True,
            False,
            "Denied",
            "InvalidSignature",
            id="off-bad-signature",
        ),
    ],
)
def test_evaluate_with_dev_auto_grant(
    claim: bodies.ResourceClaimBody,
    store: bodies.DatastoreBody | None,
    secret_exists: bool,
    auto: bool,
    phase: str,
    reason: str,
) -> None:
    verdict = claims.evaluate(claim, store, secret_exists=secret_exists, dev_auto_grant=auto)
    assert (verdict.phase, verdict.condition("Ready").reason) == (phase, reason)
    assert (verdict.condition("Ready").status == "True") == (phase == "Ready")
    assert (verdict.condition("Denied").status == "True") == (phase == "Denied")
    message = verdict.condition("Ready").message
    assert ("auto-granted in dev mode" in message) == (reason == claims.AUTO_GRANTED)


def test_an_auto_grant_says_why_and_a_denial_says_unsigned() -> None:
    granted = claims.evaluate(unsigned(), store_of("sqlite"), secret_exists=True, dev_auto_grant=True)
    assert granted.condition("Ready").message == (
        "read_write access to orders granted: auto-granted in dev mode (--dev-auto-grant-claims; "
        "unsigned; local sqlite datastore); production waits for the owner's signature"
    )
    denied = claims.evaluate(unsigned(), store_of("postgres"), secret_exists=True, dev_auto_grant=True)
    assert denied.condition("Denied").message == "the claim is not signed (no spec.signature)"


@pytest.mark.parametrize(
    ("claim_namespace", "store", "local"),
    [
        pytest.param("tenants", store_of("sqlite"), True, id="same-namespace-sqlite"),
        pytest.param("tenants", store_of("postgres"), False, id="postgres"),
        pytest.param("tenants", store_of("s3"), False, id="s3"),
        pytest.param("tenants", store_of("fs", namespace="stores"), False, id="other-namespace"),
    ],
)
def test_is_local(claim_namespace: str, store: bodies.DatastoreBody, local: bool) -> None:
    assert claims.is_local(claim_namespace, store) is local


def _claim(name: str, datastore: str, phase: str, reason: str, message: str) -> bodies.ResourceClaimBody:
    denied = "True" if phase == "Denied" else "False"
    return {
        "metadata": {"name": name, "namespace": "tenants"},
        "spec": {"datastore": datastore, "workspace": "shop", "permission": "read"},  # type: ignore[typeddict-item]
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": reason, "message": message},
                {"type": "Denied", "status": denied, "reason": reason, "message": message},
            ],
        },
    }


def test_unusable_datastores_say_why() -> None:
    denied = _claim("shop-orders", "orders", "Denied", "TenantNotAllowed", "workspace 'shop' is not allowed")
    pending = _claim("shop-files", "other/files", "Pending", "DatastoreNotFound", "Datastore other/files …")
    found = claims.unusable_datastores(
        ["orders", "files", "cache", "granted"], [denied, pending], {"granted"}
    )
    assert found == {
        "orders": "claim 'shop-orders' is Denied (TenantNotAllowed: workspace 'shop' is not allowed)",
        "files": "claim 'shop-files' is Pending (DatastoreNotFound: Datastore other/files …)",
        "cache": "no ResourceClaim of this workspace grants 'cache'",
    }
    assert claims.unusable_datastores(["granted"], [], {"granted"}) == {}
