"""Evidence records, one model per type, and batch validation.

Evidence flows pod -> cluster control -> region control (spec: Events 5). Every record has a
``type`` and these common fields:

- ``id``: idempotency key, 1-128 characters ``[A-Za-z0-9._:-]``. Senders should set it; the first
  control that accepts a record without one assigns a UUID, and every later hop keeps it, so a
  relay retried after a lost answer stores nothing twice.
- ``at``: when it happened (RFC 3339 with offset).
- ``workspace_id`` (required except for ``audit_anchor``), ``cluster_id`` (optional).

Per type (unknown keys are errors, as in manifests):

- ``deploy_status``: ``artifact_id``, ``sha256``, ``phase`` (up_to_date, fetched, verified,
  loaded, failed, rolled_back), ``message``, ``restart_required``.
- ``health``: ``status`` (healthy, degraded, unhealthy), ``pod``, ``checks`` (name -> text).
- ``metering``: ``period_start`` < ``period_end``, ``usage`` (metric -> non-negative number).
- ``violation``: ``kind`` (rollback, freeze, signature, policy, log, split_view), ``detail``, ``artifact_id``,
  ``snapshot_version``.
- ``audit_anchor``: ``log``, ``sequence`` (>= 0), ``root_sha256``.

A batch is valid only as a whole; ``validate_batch`` reports every problem with its JSON path.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import pydantic

from dap.control import errors

MAX_BATCH = 1000

RecordId = Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,128}$")]
Sha256 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=253)]


class _Record(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    id: RecordId | None = None
    at: pydantic.AwareDatetime
    workspace_id: Name
    cluster_id: Name | None = None


class DeployStatus(_Record):
    type: Literal["deploy_status"]
    artifact_id: Name
    sha256: Sha256
    phase: Literal["up_to_date", "fetched", "verified", "loaded", "failed", "rolled_back"]
    message: Annotated[str, pydantic.StringConstraints(max_length=4096)] = ""
    restart_required: bool = False


class Health(_Record):
    type: Literal["health"]
    status: Literal["healthy", "degraded", "unhealthy"]
    pod: Name | None = None
    checks: dict[str, str] = {}


class Metering(_Record):
    type: Literal["metering"]
    period_start: pydantic.AwareDatetime
    period_end: pydantic.AwareDatetime
    usage: dict[Name, Annotated[float, pydantic.Field(ge=0)]]

    @pydantic.model_validator(mode="after")
    def _period(self) -> Metering:
        if self.period_end <= self.period_start:
            raise ValueError("period_end must be after period_start")
        if not self.usage:
            raise ValueError("usage must name at least one metric")
        return self


class Violation(_Record):
    type: Literal["violation"]
    kind: Literal["rollback", "freeze", "signature", "policy", "log", "split_view"]
    detail: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=4096)]
    artifact_id: Name | None = None
    snapshot_version: Annotated[int, pydantic.Field(ge=0)] | None = None


class AuditAnchor(_Record):
    type: Literal["audit_anchor"]
    workspace_id: Name | None = None  # type: ignore[assignment]
    log: Name
    sequence: Annotated[int, pydantic.Field(ge=0)]
    root_sha256: Sha256


Record = Annotated[
    DeployStatus | Health | Metering | Violation | AuditAnchor, pydantic.Field(discriminator="type")
]
AnyRecord = DeployStatus | Health | Metering | Violation | AuditAnchor
TYPES = ("deploy_status", "health", "metering", "violation", "audit_anchor")


class _Batch(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    records: Annotated[list[Record], pydantic.Field(min_length=1, max_length=MAX_BATCH)]


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in TYPES:  # pydantic's discriminator tag; not a path segment of the body
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def validate_batch(payload: Any) -> list[AnyRecord]:
    """Validate ``{records: [...]}``; assign missing ids; raise ``EvidenceInvalidError`` listing all."""
    try:
        batch = _Batch.model_validate(payload)
    except pydantic.ValidationError as exc:
        items = [errors.ErrorItem(_path(e["loc"]), e["msg"]) for e in exc.errors()]
        raise errors.EvidenceInvalidError(f"{len(items)} problem(s) in the evidence batch", items) from exc
    return [r if r.id is not None else r.model_copy(update={"id": str(uuid.uuid4())}) for r in batch.records]


def as_json(record: _Record) -> dict[str, Any]:
    """The record as stored and relayed (``None`` fields left out)."""
    return record.model_dump(mode="json", exclude_none=True)
