"""Canonical JSON, ed25519 signing and verification, key ids and key files.

The signed message and key ids are the shared contract of ``dap.config.canonical`` (the pod
verifies with the same definitions). ``signing_key_id`` is part of the signed document, so it is
set before signing.

Key files hold the 32-byte ed25519 seed as 64 hex characters and a newline, written with mode
0600; that is all that is needed to rebuild the key pair. PyNaCl is the only crypto library here
and its errors are translated into ``errors.SignatureError`` / ``errors.SigningKeyError``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing

from dap.config import canonical
from dap.control import errors
from dap.control.ids import KeyId

ALGORITHM = "ed25519"


canonical_json = canonical.canonical_json
signing_message = canonical.signing_message


def key_id(public_key: bytes) -> KeyId:
    return KeyId(canonical.key_id(public_key))


class Signer:
    """An ed25519 key pair that signs documents in place of their ``signature`` field."""

    def __init__(self, key: nacl.signing.SigningKey) -> None:
        self._key = key
        self.public_key: bytes = bytes(key.verify_key)
        self.key_id: KeyId = key_id(self.public_key)

    @classmethod
    def generate(cls) -> Signer:
        return cls(nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed_hex(cls, text: str) -> Signer:
        try:
            seed = bytes.fromhex(text.strip())
        except ValueError as exc:
            raise errors.SigningKeyError("signing key is not hex") from exc
        if len(seed) != 32:
            raise errors.SigningKeyError(f"signing key must be 32 bytes (64 hex characters), got {len(seed)}")
        return cls(nacl.signing.SigningKey(seed))

    @classmethod
    def load(cls, path: Path) -> Signer:
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise errors.SigningKeyError(f"cannot read signing key {path}: {exc}") from exc
        return cls.from_seed_hex(text)

    def save(self, path: Path) -> None:
        """Write the seed as hex with mode 0600; refuse to overwrite an existing file."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(self.seed_hex() + "\n")

    def seed_hex(self) -> str:
        """The secret seed as hex (what a key file holds)."""
        return bytes(self._key).hex()

    def sign(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Return a copy with ``signing_key_id`` and the hex ``signature`` set."""
        unsigned = {**document, "signing_key_id": self.key_id, "signature": ""}
        signature = self._key.sign(signing_message(unsigned)).signature
        return {**unsigned, "signature": signature.hex()}

    def public_key_entry(self) -> dict[str, str]:
        return public_key_entry(self.public_key)


def public_key_entry(public_key: bytes) -> dict[str, str]:
    """One entry of ``GET /v1/keys``."""
    return {"key_id": key_id(public_key), "public_key": public_key.hex(), "algorithm": ALGORITHM}


def parse_public_key(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError as exc:
        raise errors.SigningKeyError(f"public key {text!r} is not hex") from exc
    if len(raw) != 32:
        raise errors.SigningKeyError("an ed25519 public key is 32 bytes (64 hex characters)")
    return raw


def verify(document: Mapping[str, Any], trusted: Mapping[KeyId, bytes]) -> KeyId:
    """Check the document's signature against the trusted public keys; return the key id used."""
    kid = document.get("signing_key_id")
    signature_hex = document.get("signature")
    if not isinstance(kid, str) or not isinstance(signature_hex, str):
        raise errors.SignatureError("document has no signing_key_id or signature")
    public_key = trusted.get(KeyId(kid))
    if public_key is None:
        raise errors.SignatureError(f"signing key {kid} is not trusted")
    try:
        signature = bytes.fromhex(signature_hex)
        nacl.signing.VerifyKey(public_key).verify(signing_message(document), signature)
    except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError) as exc:
        raise errors.SignatureError(f"signature does not verify with key {kid}") from exc
    return KeyId(kid)
