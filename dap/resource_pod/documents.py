"""The control plane's documents as the pod receives them: snapshots, deployments, envelopes.

The pod may not import ``dap.control`` (it speaks to it over HTTP only), so the wire shapes are
typed again here as ``TypedDict``s, and identifiers as ``NewType``s. ``parse_*`` turn raw JSON
into these types after the signature was checked, raising ``SignatureInvalid`` for a signed
document of the wrong shape (a signed but malformed document is as untrustworthy as an unsigned
one) and ``ProtocolError`` for bytes that are not a JSON object at all.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, NewType, TypedDict

from dap.resource_pod import errors

ArtifactId = NewType("ArtifactId", str)
WorkspaceId = NewType("WorkspaceId", str)
KeyId = NewType("KeyId", str)


class Deployment(TypedDict):
    workspace_id: str
    artifact_id: str
    sha256: str
    cluster_id: str | None


class Snapshot(TypedDict):
    version: int
    issued_at: str
    expires_at: str
    environment: str
    signing_key_id: str
    signature: str
    deployments: list[Deployment]


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


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """Decode ``body`` as a JSON object or raise ``ProtocolError``."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.ProtocolError(f"the {what} is not JSON") from exc
    if not isinstance(document, dict):
        raise errors.ProtocolError(f"the {what} is not a JSON object")
    return document


def _require(document: dict[str, Any], what: str, fields: dict[str, type | tuple[type, ...]]) -> None:
    for name, kind in fields.items():
        value = document.get(name)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise errors.SignatureInvalid(f"the {what} has no valid {name!r}")


def parse_time(text: str) -> datetime:
    """RFC 3339 (``Z`` or an offset) → aware datetime; raise ``SignatureInvalid``."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.SignatureInvalid(f"timestamp {text!r} is not RFC 3339") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def as_snapshot(document: dict[str, Any]) -> Snapshot:
    _require(
        document,
        "snapshot",
        {"version": int, "issued_at": str, "expires_at": str, "deployments": list, "signature": str},
    )
    for index, entry in enumerate(document["deployments"]):
        if not isinstance(entry, dict):
            raise errors.SignatureInvalid(f"snapshot deployment {index} is not an object")
        _require(
            entry, f"snapshot deployment {index}", {"workspace_id": str, "artifact_id": str, "sha256": str}
        )
    parse_time(document["issued_at"])
    parse_time(document["expires_at"])
    return Snapshot(
        version=document["version"],
        issued_at=document["issued_at"],
        expires_at=document["expires_at"],
        environment=str(document.get("environment", "")),
        signing_key_id=str(document.get("signing_key_id", "")),
        signature=document["signature"],
        deployments=[
            Deployment(
                workspace_id=d["workspace_id"],
                artifact_id=d["artifact_id"],
                sha256=d["sha256"],
                cluster_id=d.get("cluster_id"),
            )
            for d in document["deployments"]
        ],
    )


def as_envelope(document: dict[str, Any]) -> Envelope:
    _require(
        document,
        "envelope",
        {"artifact_id": str, "app": str, "version": int, "sha256": str, "files": list, "signature": str},
    )
    files: list[FileEntry] = []
    for index, entry in enumerate(document["files"]):
        if not isinstance(entry, dict):
            raise errors.SignatureInvalid(f"envelope file {index} is not an object")
        _require(entry, f"envelope file {index}", {"path": str, "sha256": str, "content": str})
        files.append(FileEntry(path=entry["path"], sha256=entry["sha256"], content=entry["content"]))
    return Envelope(
        artifact_id=document["artifact_id"],
        app=document["app"],
        version=document["version"],
        sha256=document["sha256"],
        files=files,
        signature=document["signature"],
        signing_key_id=str(document.get("signing_key_id", "")),
        prev_version=document.get("prev_version"),
        prev_sha256=document.get("prev_sha256"),
        created_at=str(document.get("created_at", "")),
    )


def deployment_for(snapshot: Snapshot, workspace: str) -> Deployment | None:
    """The desired deployment of ``workspace``; the lowest artifact id if a snapshot lists several."""
    mine = sorted(
        (d for d in snapshot["deployments"] if d["workspace_id"] == workspace), key=lambda d: d["artifact_id"]
    )
    return mine[0] if mine else None
