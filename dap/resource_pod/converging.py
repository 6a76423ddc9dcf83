"""Deployment convergence: the pod's phases and what to do next. Pure.

The spec's table (States: Deployment convergence)::

    any                        pull, desired sha256 == loaded sha256  -> up_to_date
    any                        pull, hashes differ                    -> fetched -> verified -> loaded
    fetched/verified/loaded    step fails                             -> failed
    loaded                     later failure (self-check)             -> rolled_back

The pull loop (``pulling``) owns the I/O; it asks :func:`decide` what the verified snapshot
means for the current :class:`Status`, performs the step, and records the outcome with one of
the transition functions below, each returning a new immutable ``Status``. A wrong move (say
``verified`` straight from ``up_to_date``) is a programming error and raises ``AssertionError``
through :func:`check_move`.

A failed artifact is remembered with its failure count and a retry time from ``backoff``;
:func:`decide` answers :class:`BackOff` until then, so a transient fault is retried on later
cycles and heals by itself, while a permanently bad artifact is not fetched on every cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dap.config.enums import DeployPhase
from dap.resource_pod import backoff, documents

# The spec's DeployPhase enumeration, declared once in dap.config.
Phase = DeployPhase


_FROM: dict[Phase, frozenset[Phase] | None] = {  # None: from any phase (or none yet)
    Phase.UP_TO_DATE: None,
    Phase.FETCHED: None,
    Phase.VERIFIED: frozenset({Phase.FETCHED}),
    Phase.LOADED: frozenset({Phase.VERIFIED}),
    Phase.FAILED: frozenset({Phase.FETCHED, Phase.VERIFIED, Phase.LOADED}),
    Phase.ROLLED_BACK: frozenset({Phase.LOADED}),
}


def allowed(current: Phase | None, nxt: Phase) -> bool:
    sources = _FROM[nxt]
    return sources is None or current in sources


def check_move(current: Phase | None, nxt: Phase) -> None:
    if not allowed(current, nxt):
        raise AssertionError(f"convergence cannot move from {current} to {nxt}")


@dataclass(frozen=True)
class Version:
    """The identity of a loaded artifact."""

    artifact_id: str
    sha256: str
    version: int
    app: str


@dataclass(frozen=True)
class Failure:
    """The last artifact that failed, how often in a row, and when it may be tried again."""

    artifact_id: str
    sha256: str
    count: int
    retry_at: float  # monotonic seconds
    reason: str


@dataclass(frozen=True)
class Status:
    """Where one workspace's convergence stands; replaced, never mutated."""

    phase: Phase | None = None
    running: Version | None = None
    previous: Version | None = None
    target: documents.Deployment | None = None
    snapshot_version: int | None = None
    failure: Failure | None = None
    message: str = ""

    def as_json(self) -> dict[str, object]:
        """The convergence part of ``/health``."""
        return {
            "phase": str(self.phase) if self.phase is not None else None,
            "artifact_id": self.running.artifact_id if self.running else None,
            "version": self.running.version if self.running else None,
            "sha256": self.running.sha256 if self.running else None,
            "snapshot_version": self.snapshot_version,
            "target": self.target["artifact_id"] if self.target else None,
            "message": self.message,
            "failures": self.failure.count if self.failure else 0,
        }


# --- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Idle:
    """The snapshot binds no artifact to this workspace: keep serving what runs."""


@dataclass(frozen=True)
class UpToDate:
    deployment: documents.Deployment


@dataclass(frozen=True)
class Converge:
    deployment: documents.Deployment


@dataclass(frozen=True)
class BackOff:
    deployment: documents.Deployment
    until: float


Decision = Idle | UpToDate | Converge | BackOff


def decide(status: Status, deployment: documents.Deployment | None, now: float) -> Decision:
    """What the desired ``deployment`` asks of a pod in ``status`` at monotonic time ``now``."""
    if deployment is None:
        return Idle()
    if status.running is not None and status.running.sha256 == deployment["sha256"]:
        return UpToDate(deployment)
    failure = status.failure
    if (
        failure is not None
        and failure.sha256 == deployment["sha256"]
        and failure.artifact_id == deployment["artifact_id"]
        and now < failure.retry_at
    ):
        return BackOff(deployment, failure.retry_at)
    return Converge(deployment)


# --- transitions -----------------------------------------------------------------------------


def accept_snapshot(status: Status, version: int) -> Status:
    """Remember the highest snapshot version accepted (the bar for rollback refusal)."""
    if status.snapshot_version is not None and status.snapshot_version >= version:
        return status
    return dataclasses.replace(status, snapshot_version=version)


def up_to_date(status: Status, deployment: documents.Deployment) -> Status:
    check_move(status.phase, Phase.UP_TO_DATE)
    return dataclasses.replace(
        status,
        phase=Phase.UP_TO_DATE,
        target=deployment,
        failure=None,
        message="serving the desired artifact",
    )


def fetched(status: Status, deployment: documents.Deployment) -> Status:
    check_move(status.phase, Phase.FETCHED)
    return dataclasses.replace(
        status, phase=Phase.FETCHED, target=deployment, message=f"fetched {deployment['artifact_id']}"
    )


def verified(status: Status, key_id: str) -> Status:
    check_move(status.phase, Phase.VERIFIED)
    return dataclasses.replace(
        status, phase=Phase.VERIFIED, message=f"signature and hashes valid (key {key_id})"
    )


def loaded(status: Status, version: Version, detail: str = "") -> Status:
    check_move(status.phase, Phase.LOADED)
    return dataclasses.replace(
        status,
        phase=Phase.LOADED,
        running=version,
        previous=status.running,
        failure=None,
        message=detail or f"serving {version.artifact_id} (version {version.version})",
    )


def restored(
    status: Status, version: Version, deployment: documents.Deployment, snapshot_version: int
) -> Status:
    """Boot from the state directory: the saved artifact, verified again, is what runs."""
    assert status.phase is None, "only a pod that has not converged yet restores"
    return dataclasses.replace(
        accept_snapshot(status, snapshot_version),
        phase=Phase.LOADED,
        running=version,
        target=deployment,
        message=f"restored {version.artifact_id} (version {version.version}) from the state directory",
    )


def _failure(status: Status, reason: str, now: float, policy: backoff.Backoff, spread: float) -> Failure:
    target = status.target
    assert target is not None, "a step can fail only while converging to a target"
    old = status.failure
    same = old is not None and old.sha256 == target["sha256"] and old.artifact_id == target["artifact_id"]
    count = old.count + 1 if same and old is not None else 1
    return Failure(
        artifact_id=target["artifact_id"],
        sha256=target["sha256"],
        count=count,
        retry_at=now + policy.delay(count, spread),
        reason=reason,
    )


def failed(
    status: Status, reason: str, *, now: float, policy: backoff.Backoff, spread: float = 0.5
) -> Status:
    """A step failed: the old version keeps serving; the target is retried after a backoff."""
    check_move(status.phase, Phase.FAILED)
    return dataclasses.replace(
        status, phase=Phase.FAILED, failure=_failure(status, reason, now, policy, spread), message=reason
    )


def rolled_back(
    status: Status, reason: str, *, now: float, policy: backoff.Backoff, spread: float = 0.5
) -> Status:
    """The loaded version failed later: the previous one serves again; retried after a backoff."""
    check_move(status.phase, Phase.ROLLED_BACK)
    return dataclasses.replace(
        status,
        phase=Phase.ROLLED_BACK,
        running=status.previous,
        previous=None,
        failure=_failure(status, reason, now, policy, spread),
        message=reason,
    )


def reported(status: Status) -> tuple[str, str] | None:
    """``(artifact_id, sha256)`` a deploy_status record of ``status`` names."""
    if status.phase in (Phase.UP_TO_DATE, Phase.LOADED) and status.running is not None:
        return status.running.artifact_id, status.running.sha256
    if status.target is not None:
        return status.target["artifact_id"], status.target["sha256"]
    return None


def changed(old: Status, new: Status) -> bool:
    """Whether ``new`` deserves a deploy_status record: a new phase, artifact or failure."""
    return (
        old.phase != new.phase
        or reported(old) != reported(new)
        or (old.failure.count if old.failure else 0) != (new.failure.count if new.failure else 0)
    )


def until_retry(status: Status, now: float) -> float:
    """Seconds from monotonic ``now`` until a failed artifact may be fetched again, ``inf`` when
    none waits.

    The pull loop wakes then rather than at the next interval, so a retry happens when its backoff
    ends. A retry time already past waits for the ordinary cadence (no busy loop while, say, the
    control plane is down or the snapshot no longer names the failed artifact).
    """
    failure = status.failure
    if failure is None or status.phase not in (Phase.FAILED, Phase.ROLLED_BACK):
        return float("inf")
    left = failure.retry_at - now
    return left if left > 0 else float("inf")
