"""The state directory: the last good artifact, kept so a restarted pod serves without control.

Layout of ``--state-dir`` (one sub-directory per workspace, so pods of several workspaces may
share a volume)::

    <state-dir>/<workspace>/current.json    {"format": 1, "snapshot_version": n,
                                             "deployment": {...}, "envelope": {...signed...}}
    <state-dir>/<workspace>/keys.json       {"keys": ["<hex public key>", ...]}   (--dev only)
    <state-dir>/<workspace>/log.json        the last signed tree head accepted (``logproof``)

The envelope is stored as the control plane signed it and is verified again at boot with the
trusted keys, so a file edited on disk is refused like a tampered download. ``snapshot_version``
keeps rollback refusal working across restarts, and ``log.json`` split-view refusal (its
signature is checked again at boot).

Every write is atomic: a temporary file in the same directory, ``fsync``, ``rename`` over the old
one, ``fsync`` of the directory. A crash leaves either the old or the new file, never half of one.
The functions are synchronous (the pull loop runs them in a worker thread).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dap.resource_pod import documents, errors, verifying
from dap.resource_pod.documents import KeyId

FORMAT = 1
CURRENT = "current.json"
KEYS = "keys.json"
LOG = "log.json"


@dataclass(frozen=True)
class Saved:
    """The last artifact this pod loaded successfully, as found on disk (not yet re-verified)."""

    envelope: dict[str, Any]
    deployment: documents.Deployment
    snapshot_version: int


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class StateDir:
    def __init__(self, root: Path, workspace: str) -> None:
        self.path = root / workspace

    def save(self, envelope: dict[str, Any], deployment: documents.Deployment, snapshot_version: int) -> None:
        document = {
            "format": FORMAT,
            "snapshot_version": snapshot_version,
            "deployment": dict(deployment),
            "envelope": envelope,
        }
        try:
            write_atomic(self.path / CURRENT, json.dumps(document, separators=(",", ":")).encode())
        except OSError as exc:
            raise errors.StateDirError(f"cannot write {self.path / CURRENT}: {exc.strerror or exc}") from exc

    def load(self) -> Saved | None:
        """The saved artifact, ``None`` when there is none; ``StateDirError`` when unreadable."""
        path = self.path / CURRENT
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise errors.StateDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            document = documents.json_object(data, "saved state")
            if document.get("format") != FORMAT:
                raise errors.StateDirError(f"{path} has an unknown format {document.get('format')!r}")
            envelope, deployment = document["envelope"], document["deployment"]
            version = document["snapshot_version"]
            if (
                not isinstance(envelope, dict)
                or not isinstance(deployment, dict)
                or not isinstance(version, int)
            ):
                raise errors.StateDirError(f"{path} is malformed")
            binding = documents.Deployment(
                workspace_id=str(deployment["workspace_id"]),
                artifact_id=str(deployment["artifact_id"]),
                sha256=str(deployment["sha256"]),
                cluster_id=deployment.get("cluster_id"),
            )
        except (errors.ProtocolError, KeyError) as exc:
            raise errors.StateDirError(f"{path} is malformed: {exc}") from exc
        return Saved(envelope=envelope, deployment=binding, snapshot_version=version)

    def save_keys(self, keys: dict[KeyId, bytes]) -> None:
        body = json.dumps({"keys": sorted(k.hex() for k in keys.values())}).encode()
        try:
            write_atomic(self.path / KEYS, body)
        except OSError as exc:
            raise errors.StateDirError(f"cannot write {self.path / KEYS}: {exc.strerror or exc}") from exc

    def load_keys(self) -> dict[KeyId, bytes]:
        path = self.path / KEYS
        try:
            document = documents.json_object(path.read_bytes(), "saved keys")
        except FileNotFoundError:
            return {}
        except (OSError, errors.ProtocolError) as exc:
            raise errors.StateDirError(f"cannot read {path}: {exc}") from exc
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise errors.StateDirError(f"{path} is malformed")
        try:
            return verifying.trusted_keys(str(k) for k in keys)
        except errors.ConfigError as exc:
            raise errors.StateDirError(f"{path}: {exc}") from exc

    def save_log_head(self, head: dict[str, Any]) -> None:
        try:
            write_atomic(self.path / LOG, json.dumps(head, separators=(",", ":")).encode())
        except OSError as exc:
            raise errors.StateDirError(f"cannot write {self.path / LOG}: {exc.strerror or exc}") from exc

    def load_log_head(self) -> dict[str, Any] | None:
        path = self.path / LOG
        try:
            return documents.json_object(path.read_bytes(), "saved tree head")
        except FileNotFoundError:
            return None
        except (OSError, errors.ProtocolError) as exc:
            raise errors.StateDirError(f"cannot read {path}: {exc}") from exc
