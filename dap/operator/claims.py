"""Resource claims: the signed message, ed25519 signing and verification, and the claim verdict.

A ResourceClaim grants a workspace access to a datastore. The datastore's owner signs, with the
ed25519 private key whose public half is the Datastore's ``ownerPublicKey``, the canonical
message ``datastore|workspace|permission|grantedBy|grantedAt`` (the claim's spec fields, verbatim,
joined by a vertical bar, UTF-8). Keys and signatures travel as lowercase hex. Everything here is
pure (PyNaCl does no I/O) so that ``dap claim sign`` and the operator share one definition of
the message and the tests need no cluster.

Development mode (``dap operator --dev-auto-grant-claims``, turned on by ``dap dev --fleet``)
grants a claim on a *local* datastore (``is_local``) at once when it is unsigned or its signature
does not verify, where production would deny it until the owner signs; allowedTenants and the
endpoint Secret are still required, and the Ready condition's reason ``DevAutoGranted`` says so.
"""

from __future__ import annotations

import dataclasses

import nacl.exceptions
import nacl.signing

from dap.operator import bodies, conditions

FIELDS = ("datastore", "workspace", "permission", "grantedBy", "grantedAt")
# Drivers whose data lives with the workspace itself (an in-process store, a file, a directory),
# not on a server someone else runs: a claim on one in the claim's own namespace is "local".
LOCAL_DRIVERS = frozenset({"sqlite", "memory", "fs"})
AUTO_GRANTED = "DevAutoGranted"  # reason of the Ready condition of a dev-mode auto-grant


@dataclasses.dataclass(frozen=True)
class Grant:
    datastore: str
    workspace: str
    permission: str
    granted_by: str
    granted_at: str

    @classmethod
    def from_spec(cls, spec: bodies.ResourceClaimSpec) -> Grant:
        return cls(
            datastore=spec.get("datastore", ""),
            workspace=spec.get("workspace", ""),
            permission=spec.get("permission", ""),
            granted_by=spec.get("grantedBy", ""),
            granted_at=spec.get("grantedAt", ""),
        )


def message(grant: Grant) -> bytes:
    """The canonical message a claim's signature covers."""
    parts = (grant.datastore, grant.workspace, grant.permission, grant.granted_by, grant.granted_at)
    for name, part in zip(FIELDS, parts, strict=True):
        if "|" in part:
            raise ValueError(f"{name} must not contain '|': {part!r}")
    return "|".join(parts).encode()


def keygen() -> tuple[str, str]:
    """A new ed25519 key pair as ``(private_hex, public_hex)``; the private half is the seed."""
    key = nacl.signing.SigningKey.generate()
    return key.encode().hex(), key.verify_key.encode().hex()


def public_key(private_hex: str) -> str:
    return nacl.signing.SigningKey(bytes.fromhex(private_hex)).verify_key.encode().hex()


def sign(grant: Grant, private_hex: str) -> str:
    """The hex signature of ``grant`` by the owner's private key (hex seed of 32 bytes)."""
    try:
        key = nacl.signing.SigningKey(bytes.fromhex(private_hex.strip()))
    except (ValueError, TypeError) as exc:
        raise ValueError("the private key must be 64 hex characters (an ed25519 seed)") from exc
    return key.sign(message(grant)).signature.hex()


def verify(grant: Grant, signature_hex: str, public_hex: str) -> bool:
    """True when ``signature_hex`` is the owner's signature of ``grant``; False otherwise."""
    try:
        key = nacl.signing.VerifyKey(bytes.fromhex(public_hex))
        key.verify(message(grant), bytes.fromhex(signature_hex))
    except (ValueError, TypeError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        return False
    return True


def tenant_allowed(workspace: str, namespace: str, allowed: list[str]) -> bool:
    """Is the workspace listed in the datastore's ``allowedTenants`` (by name or namespace/name)?"""
    return workspace in allowed or f"{namespace}/{workspace}" in allowed


def datastore_key(claim_namespace: str, datastore: str) -> tuple[str, str]:
    """(namespace, name) of the claim's datastore: ``name`` is in the claim's own namespace."""
    namespace, _, name = datastore.rpartition("/")
    return (namespace or claim_namespace, name)


def is_local(claim_namespace: str, datastore: bodies.DatastoreBody) -> bool:
    """A local datastore: in the claim's own namespace, and of a driver in ``LOCAL_DRIVERS``.

    Both halves matter: another namespace's datastore belongs to someone else even when it is a
    file, and a ``postgres`` datastore may be a shared server even on a laptop (the driver cannot
    tell an embedded Postgres from a production one), so neither is granted without a signature.
    """
    return (
        datastore["metadata"].get("namespace", "") == claim_namespace
        and datastore.get("spec", {}).get("driver", "") in LOCAL_DRIVERS
    )


def evaluate(
    claim: bodies.ResourceClaimBody,
    datastore: bodies.DatastoreBody | None,
    *,
    secret_exists: bool,
    skip_signature: bool = False,
    dev_auto_grant: bool = False,
) -> conditions.Verdict:
    """The claim's verdict. Denied is final for this spec; Pending waits for the datastore.

    ``dev_auto_grant`` (development mode only) lets a claim on a local datastore (``is_local``)
    past a missing or bad signature; its Ready reason is then ``AUTO_GRANTED``.
    """
    spec = claim.get("spec", {})
    namespace = claim["metadata"].get("namespace", "")
    if datastore is None:
        ns, name = datastore_key(namespace, spec.get("datastore", ""))
        return conditions.claim_pending("DatastoreNotFound", f"Datastore {ns}/{name} does not exist")
    ds_spec = datastore.get("spec", {})
    grant = Grant.from_spec(spec)
    public = ds_spec.get("ownerPublicKey", "")
    signature = spec.get("signature", "")
    auto = False
    if not skip_signature and not verify(grant, signature, public):
        if dev_auto_grant and is_local(namespace, datastore):
            auto = True
        else:
            problem = (
                "the claim is not signed (no spec.signature)"
                if not signature
                else "the signature does not verify against the datastore's ownerPublicKey"
            )
            return conditions.claim_denied("InvalidSignature", problem)
    if not tenant_allowed(grant.workspace, namespace, ds_spec.get("allowedTenants", [])):
        return conditions.claim_denied(
            "TenantNotAllowed",
            f"workspace {grant.workspace!r} is not in the datastore's allowedTenants",
        )
    if not secret_exists:
        secret = ds_spec.get("endpointSecretRef", {}).get("name", "")
        return conditions.claim_pending(
            "DatastoreNotValidated", f"the datastore's endpoint Secret {secret!r} does not exist"
        )
    granted = f"{grant.permission} access to {grant.datastore} granted"
    if auto:
        why = "unsigned" if not signature else "signature does not verify"
        return conditions.claim_ready(
            f"{granted}: auto-granted in dev mode (--dev-auto-grant-claims; {why}; local "
            f"{ds_spec.get('driver', '')} datastore); production waits for the owner's signature",
            reason=AUTO_GRANTED,
        )
    note = " (signature NOT verified: --insecure-skip-signature-verify)" if skip_signature else ""
    return conditions.claim_ready(f"{granted}{note}")


def unusable_datastores(
    named: list[str], claims: list[bodies.ResourceClaimBody], granted: set[str]
) -> dict[str, str]:
    """Datastores a workspace names (``spec.datastores``) that no Ready claim grants, with why.

    ``claims`` are the workspace's claims (any phase); the reason of one on the datastore is its
    status' message (``TenantNotAllowed``, ``InvalidSignature``: the claim says which).
    """
    unusable: dict[str, str] = {}
    for name in named:
        if name in granted:
            continue
        why = f"no ResourceClaim of this workspace grants {name!r}"
        for claim in claims:
            if claim.get("spec", {}).get("datastore", "").rpartition("/")[2] != name:
                continue
            status = claim.get("status", {})
            said = [
                f"{c.get('reason', '')}: {c.get('message', '')}"
                for c in status.get("conditions", [])
                if c.get("type") == "Denied" and c.get("status") == "True"
            ] or [
                f"{c.get('reason', '')}: {c.get('message', '')}"
                for c in status.get("conditions", [])
                if c.get("type") == "Ready"
            ]
            phase = status.get("phase", "not evaluated yet")
            why = f"claim {claim['metadata']['name']!r} is {phase}" + (f" ({said[0]})" if said else "")
        unusable[name] = why
    return unusable
