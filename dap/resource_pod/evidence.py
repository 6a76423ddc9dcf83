"""Evidence records the pod sends, and the bounded buffer that holds them until sent. Pure.

Shapes follow the control plane's ``POST /v1/evidence`` contract (docs/control.md): every record
has ``type``, ``id`` (the idempotency key, so a batch re-sent after a lost answer is stored
once), ``at`` (RFC 3339), ``workspace_id`` and optionally ``cluster_id``; unknown keys are
refused there, so the builders below set exactly the documented fields.

- ``deploy_status`` after each convergence step (``converging.changed`` says when);
- ``health`` every 30 s, ``metering`` every 5 min (intervals are settings);
- ``violation`` when a snapshot or envelope fails verification (signature, rollback, freeze).

:class:`Buffer` is bounded: when the control plane is unreachable for long, the oldest records
are dropped first and counted, so a pod never grows without limit; the newest state (and the
latest violations) are what an operator needs most.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, TypedDict, cast

from dap.resource_pod import converging, errors

MAX_BATCH = 1000  # the control plane's limit per POST
MAX_TEXT = 4096

HealthStatus = Literal["healthy", "degraded", "unhealthy"]


class Record(TypedDict):
    type: str
    id: str
    at: str
    workspace_id: str
    cluster_id: NotRequired[str]


class DeployStatus(Record):
    artifact_id: str
    sha256: str
    phase: str
    message: str
    restart_required: bool


class Health(Record):
    status: HealthStatus
    pod: NotRequired[str]
    checks: dict[str, str]


class Metering(Record):
    period_start: str
    period_end: str
    usage: dict[str, float]


class Violation(Record):
    kind: errors.ViolationKind
    detail: str
    artifact_id: NotRequired[str]
    snapshot_version: NotRequired[int]


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _common(kind: str, workspace: str, cluster: str | None, at: datetime) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": kind,
        "id": f"pod:{uuid.uuid4().hex}",
        "at": timestamp(at),
        "workspace_id": workspace,
    }
    if cluster:
        record["cluster_id"] = cluster
    return record


def deploy_status(
    status: converging.Status, *, workspace: str, cluster: str | None, at: datetime
) -> DeployStatus | None:
    """The record of ``status``; ``None`` before the pod ever had a target."""
    named = converging.reported(status)
    if named is None or status.phase is None:
        return None
    record = _common("deploy_status", workspace, cluster, at)
    record.update(
        artifact_id=named[0],
        sha256=named[1],
        phase=str(status.phase),
        message=status.message[:MAX_TEXT],
        restart_required=False,
    )
    return cast(DeployStatus, record)


def health(
    status: HealthStatus,
    checks: Mapping[str, str],
    *,
    workspace: str,
    cluster: str | None,
    pod: str,
    at: datetime,
) -> Health:
    record = _common("health", workspace, cluster, at)
    record.update(status=status, checks={k: v[:MAX_TEXT] for k, v in checks.items()})
    if pod:
        record["pod"] = pod
    return cast(Health, record)


def metering(
    usage: Mapping[str, float],
    *,
    workspace: str,
    cluster: str | None,
    start: datetime,
    end: datetime,
) -> Metering:
    record = _common("metering", workspace, cluster, end)
    record.update(
        period_start=timestamp(start),
        period_end=timestamp(end),
        usage={k: max(0.0, float(v)) for k, v in usage.items()},
    )
    return cast(Metering, record)


def violation(
    error: errors.VerificationError,
    *,
    workspace: str,
    cluster: str | None,
    at: datetime,
    artifact_id: str | None = None,
    snapshot_version: int | None = None,
) -> Violation:
    record = _common("violation", workspace, cluster, at)
    record.update(kind=error.kind, detail=(str(error) or error.__class__.__name__)[:MAX_TEXT])
    if artifact_id:
        record["artifact_id"] = artifact_id
    if snapshot_version is not None and snapshot_version >= 0:
        record["snapshot_version"] = snapshot_version
    return cast(Violation, record)


class Buffer:
    """A bounded FIFO of records waiting to be sent; the oldest are dropped when full."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: deque[Record] = deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, record: Record) -> None:
        self._items.append(record)
        self._trim()

    def take(self, limit: int = MAX_BATCH) -> list[Record]:
        """Remove and return up to ``limit`` of the oldest records."""
        count = min(limit, len(self._items))
        return [self._items.popleft() for _ in range(count)]

    def put_back(self, records: list[Record]) -> None:
        """Return a batch that could not be sent to the front, in order."""
        self._items.extendleft(reversed(records))
        self._trim()

    def peek(self) -> list[Record]:
        return list(self._items)

    def _trim(self) -> None:
        while len(self._items) > self.capacity:
            self._items.popleft()
            self.dropped += 1
