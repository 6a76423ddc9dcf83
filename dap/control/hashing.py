"""File and aggregate SHA-256 of an artifact.

The aggregate hash identifies an artifact's content independently of upload order, transport
(JSON or multipart) and envelope metadata: it is the SHA-256 of the lines ``path NUL sha256 LF``
for every file, sorted by the UTF-8 bytes of the path. Paths are part of the content (renaming a
file changes the aggregate); the file bytes enter only through their own hash, so a verifier can
recompute the aggregate from the envelope's file list without decoding the contents twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def file_sha256(content: bytes) -> str:
    """Hex SHA-256 of one file's bytes."""
    return hashlib.sha256(content).hexdigest()


def aggregate_sha256(file_hashes: Mapping[str, str]) -> str:
    """Hex SHA-256 over ``path\\0sha256\\n`` lines sorted by the UTF-8 bytes of the path."""
    digest = hashlib.sha256()
    for path in sorted(file_hashes, key=lambda p: p.encode("utf-8")):
        digest.update(f"{path}\0{file_hashes[path]}\n".encode())
    return digest.hexdigest()
