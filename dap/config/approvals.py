"""Approvals: the k-of-n author signatures a signing policy asks of an artifact (TUF-style threshold).

Shared by the control (which refuses a registration short of its app's threshold and embeds the
valid approvals in the envelope it signs) and the pod (which counts them again against the
policy it was given, so it does not take the control's word for it).

An approval is ``{"key_id", "signature"}``: the hex ed25519 signature, by an author's key, of
the canonical JSON of ``{"purpose": "dap.approval.v1", "app": APP, "sha256": AGGREGATE}``. It
approves content (the aggregate of ``canonical``) for an app, not a version: the control decides
the version, and the same approved content registered again is the same approval.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import nacl.exceptions
import nacl.signing

from dap.config import canonical

PURPOSE = "dap.approval.v1"
MAX_APPROVALS = 32


def message(app: str, sha256: str) -> bytes:
    return canonical.canonical_json({"purpose": PURPOSE, "app": app, "sha256": sha256})


def approve(seed: bytes, app: str, sha256: str) -> dict[str, str]:
    """An approval by the ed25519 key with this 32-byte seed."""
    key = nacl.signing.SigningKey(seed)
    return {
        "key_id": canonical.key_id(bytes(key.verify_key)),
        "signature": key.sign(message(app, sha256)).signature.hex(),
    }


def approved_by(approvals: Any, keys: Mapping[str, bytes], app: str, sha256: str) -> list[dict[str, str]]:
    """The valid approvals among ``approvals`` by distinct keys of ``keys`` (key id -> public key).

    Unknown keys, bad signatures, duplicates and malformed items are left out, never trusted.
    """
    if not isinstance(approvals, list):
        return []
    wanted = message(app, sha256)
    valid: dict[str, dict[str, str]] = {}
    for item in approvals[:MAX_APPROVALS]:
        if not isinstance(item, dict):
            continue
        kid, signature = item.get("key_id"), item.get("signature")
        if not isinstance(kid, str) or not isinstance(signature, str) or kid in valid or kid not in keys:
            continue
        try:
            nacl.signing.VerifyKey(keys[kid]).verify(wanted, bytes.fromhex(signature))
        except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
            continue
        valid[kid] = {"key_id": kid, "signature": signature}
    return [valid[k] for k in sorted(valid)]
