"""Condition and phase evaluation: pure functions from observed state to ``status``.

The specification lists the conditions (Workspace: Ready, Progressing, Degraded; Datastore:
Validated, Denied; ResourceClaim: Ready, Denied) but not the phases' meaning nor the reasons;
docs/decisions/operator.md records both. Each evaluator returns a ``Verdict`` (phase plus the
wanted condition triples); ``merge`` folds it into the current conditions keeping
``lastTransitionTime`` whenever a condition's status did not change, so that re-evaluating an
unchanged object yields an identical status and therefore no write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dap.operator import bodies


@dataclasses.dataclass(frozen=True)
class Wanted:
    type: str
    status: bodies.ConditionStatus
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Verdict:
    phase: str
    conditions: tuple[Wanted, ...]

    def condition(self, type_: str) -> Wanted:
        return next(c for c in self.conditions if c.type == type_)


def merge(
    current: Sequence[bodies.Condition],
    wanted: Sequence[Wanted],
    *,
    generation: int | None,
    now: str,
) -> list[bodies.Condition]:
    """New conditions list: ``wanted`` in order, transition times kept where status is unchanged."""
    by_type = {c["type"]: c for c in current}
    merged: list[bodies.Condition] = []
    for want in wanted:
        old = by_type.get(want.type)
        since = old["lastTransitionTime"] if old is not None and old["status"] == want.status else now
        condition: bodies.Condition = {
            "type": want.type,
            "status": want.status,
            "reason": want.reason,
            "message": want.message,
            "lastTransitionTime": since,
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        merged.append(condition)
    return merged


def _workspace(phase: str, ready: Wanted, progressing: Wanted, degraded: Wanted) -> Verdict:
    return Verdict(phase=phase, conditions=(ready, progressing, degraded))


def workspace_failed(reason: str, message: str) -> Verdict:
    """The workspace cannot be reconciled until its spec is edited."""
    return _workspace(
        "Failed",
        Wanted("Ready", "False", reason, message),
        Wanted("Progressing", "False", reason, message),
        Wanted("Degraded", "True", reason, message),
    )


def workspace_pending(reason: str, message: str) -> Verdict:
    """The workspace waits for something outside it (its ClusterClass, typically)."""
    return _workspace(
        "Pending",
        Wanted("Ready", "False", reason, message),
        Wanted("Progressing", "False", reason, message),
        Wanted("Degraded", "False", reason, message),
    )


DATASTORE_NOT_USABLE = "DatastoreNotUsable"


def with_datastores(verdict: Verdict, unusable: dict[str, str]) -> Verdict:
    """A workspace naming datastores it may not use (no Ready claim grants them) is Degraded.

    ``unusable`` maps each such datastore to why (its claim's message, or that none exists). Ready
    and Progressing stay what the Deployment says (the pods may serve what needs no datastore); a
    workspace that is not reconciled at all (Pending, Failed) keeps its own, earlier reason.
    """
    if not unusable or verdict.phase in ("Pending", "Failed"):
        return verdict
    message = "; ".join(f"datastore {name!r}: {why}" for name, why in sorted(unusable.items()))
    return _workspace(
        "Degraded",
        verdict.condition("Ready"),
        verdict.condition("Progressing"),
        Wanted("Degraded", "True", DATASTORE_NOT_USABLE, message),
    )


def with_artifact(verdict: Verdict, problem: tuple[str, str] | None) -> Verdict:
    """A workspace whose pods report a refused artifact (``podhealth``: ``(reason, message)``) is
    Degraded with that reason; Ready and Progressing stay what the Deployment says (the pods keep
    serving the version they had). A Degraded condition already True (datastores) keeps its
    reason and gets the artifact's message appended; Pending and Failed keep their own."""
    if problem is None or verdict.phase in ("Pending", "Failed"):
        return verdict
    reason, message = problem
    degraded = verdict.condition("Degraded")
    if degraded.status == "True":
        reason, message = degraded.reason, f"{degraded.message}; {reason}: {message}"
    return _workspace(
        "Degraded",
        verdict.condition("Ready"),
        verdict.condition("Progressing"),
        Wanted("Degraded", "True", reason, message),
    )


def _deployment_condition(dep: bodies.DeploymentBody, type_: str) -> bodies.DeploymentCondition | None:
    for condition in dep.get("status", {}).get("conditions", []):
        if condition.get("type") == type_:
            return condition
    return None


ROLLOUT_COMPLETE = "NewReplicaSetAvailable"  # reason of a Deployment's Progressing condition


def workspace(desired_replicas: int, dep: bodies.DeploymentBody | None) -> Verdict:
    """Phase and conditions of a workspace from its Deployment as last observed."""
    if dep is None:
        return _workspace(
            "Pending",
            Wanted("Ready", "False", "DeploymentMissing", "the Deployment is not created yet"),
            Wanted("Progressing", "True", "Creating", "creating the Deployment"),
            Wanted("Degraded", "False", "Creating", "creating the Deployment"),
        )
    status = dep.get("status", {})
    generation = dep["metadata"].get("generation")
    observed = status.get("observedGeneration")
    current = status.get("replicas", 0)
    updated = status.get("updatedReplicas", 0)
    available = status.get("availableReplicas", 0)
    counts = f"{available}/{desired_replicas} replicas available"

    stalled = _deployment_condition(dep, "Progressing")
    if stalled is not None and stalled.get("reason") == "ProgressDeadlineExceeded":
        message = stalled.get("message", "the rollout exceeded its progress deadline")
        return _workspace(
            "Degraded",
            Wanted("Ready", "True" if available >= max(desired_replicas, 1) else "False", "Rollout", counts),
            Wanted("Progressing", "False", "ProgressDeadlineExceeded", message),
            Wanted("Degraded", "True", "ProgressDeadlineExceeded", message),
        )
    failure = _deployment_condition(dep, "ReplicaFailure")
    if failure is not None and failure.get("status") == "True":
        message = failure.get("message", "replicas cannot be created")
        return _workspace(
            "Degraded",
            Wanted("Ready", "False", "ReplicaFailure", message),
            Wanted("Progressing", "False", "ReplicaFailure", message),
            Wanted("Degraded", "True", "ReplicaFailure", message),
        )
    if generation is not None and (observed is None or observed < generation):
        return _workspace(
            "Progressing",
            Wanted("Ready", "False", "RolloutPending", "the Deployment's change is not observed yet"),
            Wanted("Progressing", "True", "RolloutPending", "the Deployment's change is not observed yet"),
            Wanted("Degraded", "False", "RolloutPending", counts),
        )
    if desired_replicas == 0:
        if current == 0:
            idle = "scaled to zero while idle"
            return _workspace(
                "Idle",
                Wanted("Ready", "False", "ScaledToZero", idle),
                Wanted("Progressing", "False", "ScaledToZero", idle),
                Wanted("Degraded", "False", "ScaledToZero", idle),
            )
        draining = f"scaling down to zero, {current} replicas left"
        return _workspace(
            "Progressing",
            Wanted("Ready", "False", "ScalingToZero", draining),
            Wanted("Progressing", "True", "ScalingToZero", draining),
            Wanted("Degraded", "False", "ScalingToZero", draining),
        )
    if updated < desired_replicas:
        rolling = f"{updated}/{desired_replicas} replicas updated"
        return _workspace(
            "Progressing",
            Wanted("Ready", "True" if available >= desired_replicas else "False", "Rollout", counts),
            Wanted("Progressing", "True", "RollingOut", rolling),
            Wanted("Degraded", "False", "RollingOut", rolling),
        )
    rollout = _deployment_condition(dep, "Progressing")
    if available < desired_replicas and (rollout is None or rollout.get("reason") != ROLLOUT_COMPLETE):
        # Every replica is updated but not all are available yet: the pods are starting. The
        # deployment controller says "NewReplicaSetAvailable" only once the rollout has
        # completed; before that, missing replicas are progress, not degradation (the real
        # controller showed this state on every start; the emulator's status skipped it).
        starting = f"{counts}, the rest starting"
        return _workspace(
            "Progressing",
            Wanted("Ready", "False", "ReplicasStarting", starting),
            Wanted("Progressing", "True", "ReplicasStarting", starting),
            Wanted("Degraded", "False", "ReplicasStarting", starting),
        )
    if available < desired_replicas:
        return _workspace(
            "Degraded",
            Wanted("Ready", "False", "ReplicasUnavailable", counts),
            Wanted("Progressing", "False", "RolloutComplete", "every replica runs the current version"),
            Wanted("Degraded", "True", "ReplicasUnavailable", counts),
        )
    return _workspace(
        "Ready",
        Wanted("Ready", "True", "ReplicasAvailable", counts),
        Wanted("Progressing", "False", "RolloutComplete", "every replica runs the current version"),
        Wanted("Degraded", "False", "ReplicasAvailable", counts),
    )


def datastore(secret_exists: bool, secret_name: str) -> Verdict:
    if secret_exists:
        message = f"endpoint Secret {secret_name!r} exists"
        return Verdict(
            phase="Validated",
            conditions=(
                Wanted("Validated", "True", "SecretFound", message),
                Wanted("Denied", "False", "SecretFound", message),
            ),
        )
    message = f"endpoint Secret {secret_name!r} does not exist"
    return Verdict(
        phase="Denied",
        conditions=(
            Wanted("Validated", "False", "SecretMissing", message),
            Wanted("Denied", "True", "SecretMissing", message),
        ),
    )


def claim_ready(message: str, reason: str = "Granted") -> Verdict:
    return Verdict(
        phase="Ready",
        conditions=(
            Wanted("Ready", "True", reason, message),
            Wanted("Denied", "False", reason, message),
        ),
    )


def claim_denied(reason: str, message: str) -> Verdict:
    return Verdict(
        phase="Denied",
        conditions=(
            Wanted("Ready", "False", reason, message),
            Wanted("Denied", "True", reason, message),
        ),
    )


def claim_pending(reason: str, message: str) -> Verdict:
    """Neither granted nor denied: waiting for the datastore or its Secret to exist."""
    return Verdict(
        phase="Pending",
        conditions=(
            Wanted("Ready", "False", reason, message),
            Wanted("Denied", "False", reason, message),
        ),
    )
