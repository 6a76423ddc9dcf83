"""Verification of what the control plane sends: signatures, hashes, rollback and freeze. Pure.

The pod may not import ``dap.control``: it trusts the control plane's *signature*, not its code.
Both sides take the contract's definitions from ``dap.config.canonical``, and
``tests/resource_pod/test_contract.py`` signs with ``dap.control``'s signer and verifies here.

The contract (ARCHITECTURE.md, docs/decisions/control.md):

- the signed message is the document's canonical JSON — keys sorted, no whitespace, UTF-8 with
  non-ASCII kept, ``signature`` set to ``""`` (``signing_key_id`` is part of the message);
- the signature is hex ed25519 (PyNaCl); a key id is the first 16 hex characters of the SHA-256
  of the raw 32-byte public key, and only keys given to the pod are trusted;
- each file's ``sha256`` is the hex SHA-256 of its bytes; the aggregate is the SHA-256 of the
  lines ``path NUL sha256 LF`` sorted by the UTF-8 bytes of the path;
- ``artifact_id`` is ``"art-"`` + the first 24 hex of SHA-256(``app NUL version NUL sha256``).

On top of the signature the pod checks what only it can know: the envelope is the one the
snapshot names (artifact id and aggregate), a snapshot is not older than the one it runs
(rollback), a snapshot is not past ``expires_at`` (freeze: a replayed or stuck control), and
an envelope carries the approvals the signing policy given to the pod asks for (``check_policy``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import nacl.exceptions
import nacl.signing

from dap.config import approvals, canonical
from dap.resource_pod import documents, errors
from dap.resource_pod.documents import KeyId

PUBLIC_KEY_BYTES = 32


canonical_json = canonical.canonical_json
signing_message = canonical.signing_message
file_sha256 = canonical.file_sha256
aggregate_sha256 = canonical.aggregate_sha256
artifact_id_for = canonical.artifact_id


def key_id(public_key: bytes) -> KeyId:
    return KeyId(canonical.key_id(public_key))


def parse_public_key(text: str) -> bytes:
    """One hex ed25519 public key; raise ``ConfigError``."""
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError as exc:
        raise errors.ConfigError(f"trusted key {text.strip()[:70]!r} is not hex") from exc
    if len(raw) != PUBLIC_KEY_BYTES:
        raise errors.ConfigError(
            f"trusted key {text.strip()[:70]!r} is {len(raw)} bytes; an ed25519 public key is 32 (64 hex)"
        )
    return raw


def trusted_keys(values: Iterable[str]) -> dict[KeyId, bytes]:
    """Comma- or whitespace-separated hex public keys (``DAP_TRUSTED_KEYS``) → ``{key id: key}``."""
    out: dict[KeyId, bytes] = {}
    for value in values:
        for part in value.replace(",", " ").split():
            raw = parse_public_key(part)
            out[key_id(raw)] = raw
    return out


def verify_signature(document: Mapping[str, Any], trusted: Mapping[KeyId, bytes]) -> KeyId:
    """Check ``document``'s ed25519 signature against the trusted keys; return the key id used."""
    kid = document.get("signing_key_id")
    signature_hex = document.get("signature")
    if not isinstance(kid, str) or not isinstance(signature_hex, str) or not signature_hex:
        raise errors.SignatureInvalid("the document carries no signing_key_id or signature")
    public_key = trusted.get(KeyId(kid))
    if public_key is None:
        raise errors.SignatureInvalid(f"signing key {kid} is not among the pod's trusted keys")
    try:
        signature = bytes.fromhex(signature_hex)
        nacl.signing.VerifyKey(public_key).verify(signing_message(document), signature)
    except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError) as exc:
        raise errors.SignatureInvalid(f"the signature does not verify with key {kid}") from exc
    return KeyId(kid)


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: the envelope's identity and its decoded files."""

    artifact_id: str
    app: str
    version: int
    sha256: str
    files: Mapping[str, bytes]
    key_id: KeyId


def verify_envelope(
    raw: Mapping[str, Any], trusted: Mapping[KeyId, bytes], expected: documents.Deployment
) -> Artifact:
    """Signature, the snapshot binding, every file hash and the aggregate; return the files."""
    kid = verify_signature(raw, trusted)
    envelope = documents.as_envelope(dict(raw))
    if envelope["artifact_id"] != expected["artifact_id"]:
        raise errors.SignatureInvalid(
            f"the control sent artifact {envelope['artifact_id']} for {expected['artifact_id']}"
        )
    if envelope["sha256"] != expected["sha256"]:
        raise errors.SignatureInvalid(
            f"artifact {envelope['artifact_id']} has sha256 {envelope['sha256'][:12]}…, "
            f"the snapshot names {expected['sha256'][:12]}…"
        )
    files: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    for entry in envelope["files"]:
        path = entry["path"]
        try:
            content = base64.b64decode(entry["content"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise errors.SignatureInvalid(f"file {path} is not valid base64") from exc
        actual = file_sha256(content)
        if actual != entry["sha256"]:
            raise errors.SignatureInvalid(f"file {path} does not match its sha256")
        if path in files:
            raise errors.SignatureInvalid(f"file {path} appears twice in the envelope")
        files[path] = content
        hashes[path] = actual
    if aggregate_sha256(hashes) != envelope["sha256"]:
        raise errors.SignatureInvalid("the aggregate sha256 does not match the files")
    if envelope["artifact_id"] != artifact_id_for(envelope["app"], envelope["version"], envelope["sha256"]):
        raise errors.SignatureInvalid("artifact_id does not match app, version and sha256")
    return Artifact(
        artifact_id=envelope["artifact_id"],
        app=envelope["app"],
        version=envelope["version"],
        sha256=envelope["sha256"],
        files=files,
        key_id=kid,
    )


def verify_snapshot(
    raw: Mapping[str, Any],
    trusted: Mapping[KeyId, bytes],
    *,
    running_version: int | None,
    now: datetime,
    skew: timedelta = timedelta(seconds=30),
) -> documents.Snapshot:
    """Signature, then rollback (lower version than running), then freeze (expired).

    The order matters for the evidence: an unsigned document is a ``signature`` violation
    whatever it claims; only a genuine snapshot can be a rollback or a freeze.
    """
    verify_signature(raw, trusted)
    snapshot = documents.as_snapshot(dict(raw))
    if running_version is not None and snapshot["version"] < running_version:
        raise errors.RollbackRefused(
            f"snapshot version {snapshot['version']} is lower than the running version {running_version}"
        )
    expires = documents.parse_time(snapshot["expires_at"])
    if now > expires + skew:
        raise errors.SnapshotExpired(
            f"snapshot version {snapshot['version']} expired at {snapshot['expires_at']}: "
            "the control plane is frozen or replaying an old answer"
        )
    return snapshot


def check_policy(
    raw: Mapping[str, Any], artifact: Artifact, keys: Mapping[KeyId, bytes], threshold: int
) -> int:
    """``PolicyRefused`` unless the envelope carries ``threshold`` valid approvals by ``keys``.

    The approvals sign the app and aggregate (``dap.config.approvals``); the pod counts them
    itself against the policy it was given, whatever the control claims. Returns the count.
    """
    if threshold <= 0:
        return 0
    valid = approvals.approved_by(
        raw.get("approvals"), {str(k): v for k, v in keys.items()}, artifact.app, artifact.sha256
    )
    if len(valid) < threshold:
        raise errors.PolicyRefused(
            f"artifact {artifact.artifact_id} has {len(valid)} valid approval(s); "
            f"the signing policy needs {threshold} of {len(keys)}"
        )
    return len(valid)
