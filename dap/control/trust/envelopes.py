"""Artifact envelopes: building, decoding and full verification.

An envelope (spec: ArtifactEnvelope) is the unit of trust: it carries every file of an artifact
(content base64), the per-file and aggregate SHA-256, the version chain and an ed25519
signature over its canonical JSON. It is stored and served as the exact signed bytes, so what a
resource pod verifies is byte for byte what the region signed.

Paths are normalised here, once, for every way files arrive (JSON, multipart, ``dap register``):
relative, forward slashes, no ``.`` or ``..`` segments, no duplicates.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from dap.config import canonical
from dap.control import errors
from dap.control.ids import ArtifactId, KeyId
from dap.control.trust import signing

APP_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
MAX_PATH_LENGTH = 1024


class FileEntry(TypedDict):
    path: str
    sha256: str
    content: str  # base64


class Envelope(TypedDict):
    artifact_id: str
    app: str
    version: int
    sha256: str
    files: list[FileEntry]
    signature: str
    signing_key_id: str
    prev_version: int | None
    prev_sha256: str | None
    created_at: str


def normalise_path(raw: str) -> str:
    """Return the canonical relative path or raise ``RequestError``."""
    path = raw.replace("\\", "/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or raw.startswith("/") or any(p == ".." for p in parts):
        raise errors.RequestError(
            f"invalid file path {raw!r}", [errors.ErrorItem(raw, "paths must be relative, without '..'")]
        )
    clean = "/".join(parts)
    if len(clean) > MAX_PATH_LENGTH or "\0" in clean:
        raise errors.RequestError(f"invalid file path {raw[:80]!r}")
    return clean


def check_app_name(app: str) -> str:
    if not APP_NAME.fullmatch(app):
        raise errors.RequestError(
            f"invalid app name {app!r}",
            [errors.ErrorItem("app", "must match ^[a-z][a-z0-9_-]{0,62}$")],
        )
    return app


def artifact_id_for(app: str, version: int, sha256: str) -> ArtifactId:
    """Deterministic id: the same app, version and content always give the same id."""
    return ArtifactId(canonical.artifact_id(app, version, sha256))


def build(
    *,
    app: str,
    version: int,
    files: Mapping[str, bytes],
    file_hashes: Mapping[str, str],
    sha256: str,
    prev_version: int | None,
    prev_sha256: str | None,
    created_at: str,
    signer: signing.Signer,
    approvals: list[dict[str, str]] | None = None,
) -> Envelope:
    """Assemble and sign an envelope; ``file_hashes``/``sha256`` come from ``dap.config.canonical``."""
    entries: list[FileEntry] = [
        {"path": path, "sha256": file_hashes[path], "content": base64.b64encode(files[path]).decode("ascii")}
        for path in sorted(files, key=lambda p: p.encode("utf-8"))
    ]
    unsigned: dict[str, Any] = {
        "artifact_id": artifact_id_for(app, version, sha256),
        "app": app,
        "version": version,
        "sha256": sha256,
        "files": entries,
        "signature": "",
        "signing_key_id": "",
        "prev_version": prev_version,
        "prev_sha256": prev_sha256,
        "created_at": created_at,
    }
    if approvals:  # the authors' k-of-n approvals (``dap.config.approvals``), under the signature
        unsigned["approvals"] = approvals
    signed = signer.sign(unsigned)
    return cast(Envelope, signed)


def decode_files(envelope: Mapping[str, Any]) -> dict[str, bytes]:
    """Decode every file and check its hash and the aggregate; raise ``SignatureError``."""
    files: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    entries = envelope.get("files")
    if not isinstance(entries, list):
        raise errors.SignatureError("envelope has no file list")
    for entry in entries:
        try:
            path = str(entry["path"])
            content = base64.b64decode(entry["content"], validate=True)
            declared = str(entry["sha256"])
        except (KeyError, TypeError, binascii.Error) as exc:
            raise errors.SignatureError("malformed file entry in envelope") from exc
        actual = canonical.file_sha256(content)
        if actual != declared:
            raise errors.SignatureError(f"file {path} does not match its sha256")
        files[path] = content
        hashes[path] = actual
    if canonical.aggregate_sha256(hashes) != envelope.get("sha256"):
        raise errors.SignatureError("aggregate sha256 does not match the files")
    return files


def verify(envelope: Mapping[str, Any], trusted: Mapping[KeyId, bytes]) -> dict[str, bytes]:
    """Signature, per-file hashes and aggregate; return the decoded files."""
    signing.verify(envelope, trusted)
    files = decode_files(envelope)
    if envelope.get("artifact_id") != artifact_id_for(
        str(envelope.get("app")), int(envelope.get("version", 0)), str(envelope.get("sha256"))
    ):
        raise errors.SignatureError("artifact_id does not match app, version and sha256")
    return files
