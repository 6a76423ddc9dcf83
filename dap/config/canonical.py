"""The artifact contract shared by the control plane (which signs) and the resource pod (which verifies).

Both sides must compute the same bytes, so the definitions live here once, beside the artifact
records, rather than in either side's code (the pod may not import ``dap.control``):

- the signed message of an envelope or snapshot is its canonical JSON — keys sorted, no
  whitespace, UTF-8 with non-ASCII kept — with ``signature`` set to ``""`` (ARCHITECTURE.md);
- a key id is the first 16 hex characters of the SHA-256 of the raw 32-byte ed25519 public key;
- a file's hash is the hex SHA-256 of its bytes; the aggregate is the SHA-256 of the lines
  ``path NUL sha256 LF`` sorted by the UTF-8 bytes of the path, so it is independent of upload
  order and transport, and a verifier recomputes it from the file list alone;
- an artifact id is ``art-`` + the first 24 hex of SHA-256(``app NUL version NUL sha256``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(document: Any) -> bytes:
    """Keys sorted, no whitespace, UTF-8 (non-ASCII kept as is)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signing_message(document: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: the document with ``signature`` set to the empty string."""
    return canonical_json({**document, "signature": ""})


def key_id(public_key: bytes) -> str:
    """First 16 hex characters of the SHA-256 of the raw public key."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def file_sha256(content: bytes) -> str:
    """Hex SHA-256 of one file's bytes."""
    return hashlib.sha256(content).hexdigest()


def aggregate_sha256(file_hashes: Mapping[str, str]) -> str:
    """Hex SHA-256 over ``path\\0sha256\\n`` lines sorted by the UTF-8 bytes of the path."""
    digest = hashlib.sha256()
    for path in sorted(file_hashes, key=lambda p: p.encode("utf-8")):
        digest.update(f"{path}\0{file_hashes[path]}\n".encode())
    return digest.hexdigest()


def artifact_id(app: str, version: int, sha256: str) -> str:
    """The id of version ``version`` of ``app`` with aggregate ``sha256``."""
    return "art-" + hashlib.sha256(f"{app}\0{version}\0{sha256}".encode()).hexdigest()[:24]
