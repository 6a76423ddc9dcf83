"""The control-plane records of the specification: artifact envelope, deployment, snapshot, evidence.

They are shared vocabulary between the control plane (which produces them) and the resource pod
(which consumes them over HTTP), so they live with the other declared records. Field names are
exactly the spec's; the extra fields of Deployment (``sha256``, ``cluster_id``) and the snapshot's
``expires_at`` are ARCHITECTURE.md's decisions, and a snapshot names its ``signing_key_id`` as an
envelope does. ``tests/control/test_shared_records.py`` parses a real control plane's output with them.
"""

from __future__ import annotations

from datetime import datetime

import pydantic

from dap.config.base import Record
from dap.config.enums import EvidenceType


class ArtifactFile(Record):
    path: str
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    content: str = pydantic.Field(description="base64")


class ArtifactEnvelope(Record):
    artifact_id: str
    app: str
    version: int = pydantic.Field(ge=1)
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    files: tuple[ArtifactFile, ...]
    signature: str
    signing_key_id: str
    prev_version: int | None = None
    prev_sha256: str | None = None
    created_at: datetime


class Deployment(Record):
    workspace_id: str
    artifact_id: str
    sha256: str | None = None
    cluster_id: str | None = None


class Snapshot(Record):
    version: int = pydantic.Field(ge=0)
    issued_at: datetime
    expires_at: datetime | None = None
    environment: str | None = None
    signing_key_id: str
    signature: str
    deployments: tuple[Deployment, ...] = ()


class EvidenceRecord(pydantic.BaseModel):
    """A type plus type-dependent fields; the control plane validates each type's fields."""

    model_config = pydantic.ConfigDict(extra="allow", frozen=True)

    type: EvidenceType
