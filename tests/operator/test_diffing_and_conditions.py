"""Desired-versus-live patches and the condition evaluators (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from dap.operator import bodies, conditions, diffing


@pytest.mark.parametrize(
    ("desired", "live", "patch"),
    [
        pytest.param({"a": 1}, {"a": 1, "b": 2}, {}, id="server-defaults-are-not-a-diff"),
        pytest.param({"a": 1}, {"a": 2}, {"a": 1}, id="changed-scalar"),
        pytest.param(
            {"m": {"x": 1, "y": 2}}, {"m": {"x": 1, "y": 3}}, {"m": {"y": 2}}, id="nested-only-diff"
        ),
        pytest.param(
            {"l": [{"name": "c", "image": "i:2"}]},
            {"l": [{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent"}]},
            {"l": [{"name": "c", "image": "i:2"}]},
            id="list-replaced-wholesale",
        ),
        pytest.param(
            {"l": [{"name": "c"}]},
            {"l": [{"name": "c", "terminationMessagePath": "/dev/termination-log"}]},
            {},
            id="list-with-defaults-equal",
        ),
        pytest.param({"l": [1, 2]}, {"l": [1]}, {"l": [1, 2]}, id="list-length"),
        pytest.param({"a": None}, {"a": {"x": 1}}, {"a": None}, id="must-be-absent-removed"),
        pytest.param({"a": None}, {}, {}, id="must-be-absent-already"),
        pytest.param({"m": {}}, {}, {}, id="empty-map-where-none"),
        pytest.param(
            {"resources": {"limits": {"cpu": "0.5", "memory": "1024Mi"}}},
            {"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            {},
            id="quantities-as-the-server-canonicalises-them",
        ),
        pytest.param(
            {"l": [{"resources": {"requests": {"cpu": "1000m"}}}]},
            {"l": [{"resources": {"requests": {"cpu": "1"}}}]},
            {},
            id="quantities-inside-a-list",
        ),
        pytest.param(
            {"resources": {"limits": {"cpu": "1"}}},
            {"resources": {"limits": {"cpu": "2"}}},
            {"resources": {"limits": {"cpu": "1"}}},
            id="changed-quantity",
        ),
        pytest.param({"a": "0.5"}, {"a": "500m"}, {"a": "0.5"}, id="no-quantities-outside-resources"),
        pytest.param(
            {"data": {"A": "1"}},
            {"data": {"A": "1", "B": "2"}},
            {"data": {"B": None}},
            id="owned-map-extra-key",
        ),
        pytest.param(
            {"spec": {"template": {"spec": {"nodeSelector": {}}}}},
            {"spec": {"template": {"spec": {"nodeSelector": {"dap.io/old": "x"}}}}},
            {"spec": {"template": {"spec": {"nodeSelector": {"dap.io/old": None}}}}},
            id="node-selector-owned",
        ),
        pytest.param({"new": {"a": None, "b": 1}}, {}, {"new": {"b": 1}}, id="new-subtree-without-markers"),
    ],
)
def test_patch_for(desired: dict[str, Any], live: dict[str, Any], patch: dict[str, Any]) -> None:
    assert diffing.patch_for(desired, live) == patch


def test_applying_the_patch_makes_live_contain_desired() -> None:
    desired = {"spec": {"replicas": 2, "template": {"metadata": {"annotations": {"h": None, "c": "1"}}}}}
    live = {"spec": {"replicas": 1, "template": {"metadata": {"annotations": {"h": "old"}}}}, "status": {}}
    patch = diffing.patch_for(desired, live)

    def merge(target: Any, p: Any) -> Any:
        if not isinstance(p, dict):
            return p
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in p.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out.get(k), v)
        return out

    assert diffing.patch_for(desired, merge(live, patch)) == {}


def cond(type_: str, status: bodies.ConditionStatus, since: str = "t0") -> bodies.Condition:
    return {"type": type_, "status": status, "reason": "R", "message": "m", "lastTransitionTime": since}


def test_merge_keeps_transition_time_when_status_is_unchanged() -> None:
    current = [cond("Ready", "True", "t0"), cond("Degraded", "False", "t0")]
    wanted = (
        conditions.Wanted("Ready", "True", "Other", "x"),
        conditions.Wanted("Degraded", "True", "Bad", "y"),
    )
    merged = conditions.merge(current, wanted, generation=4, now="t1")
    assert [(c["type"], c["lastTransitionTime"], c.get("observedGeneration")) for c in merged] == [
        ("Ready", "t0", 4),
        ("Degraded", "t1", 4),
    ]


COMPLETE = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
UPDATING = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}


def dep(*, generation: int = 2, observed: int = 2, **status: Any) -> bodies.DeploymentBody:
    return {
        "metadata": {"name": "d", "generation": generation},
        "status": {"observedGeneration": observed, **status},
    }  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("replicas", "deployment", "phase", "ready"),
    [
        pytest.param(1, None, "Pending", "False", id="no-deployment"),
        pytest.param(2, dep(observed=1), "Progressing", "False", id="generation-not-observed"),
        pytest.param(
            2, dep(replicas=2, updatedReplicas=1, availableReplicas=1), "Progressing", "False", id="rolling"
        ),
        pytest.param(2, dep(replicas=2, updatedReplicas=2, availableReplicas=2), "Ready", "True", id="ready"),
        pytest.param(
            2,
            dep(replicas=2, updatedReplicas=2, availableReplicas=1, conditions=[COMPLETE]),
            "Degraded",
            "False",
            id="unavailable-after-the-rollout",
        ),
        pytest.param(
            2,
            dep(replicas=2, updatedReplicas=2, availableReplicas=0, conditions=[UPDATING]),
            "Progressing",
            "False",
            id="pods-starting",
        ),
        pytest.param(
            2,
            dep(replicas=2, updatedReplicas=2, availableReplicas=0),
            "Progressing",
            "False",
            id="no-conditions-yet",
        ),
        pytest.param(0, dep(replicas=0), "Idle", "False", id="idle"),
        pytest.param(0, dep(replicas=1), "Progressing", "False", id="draining"),
        pytest.param(
            1,
            dep(
                replicas=1,
                conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
            ),
            "Degraded",
            "False",
            id="deadline",
        ),
        pytest.param(
            1,
            dep(
                replicas=0,
                conditions=[{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}],
            ),
            "Degraded",
            "False",
            id="replica-failure",
        ),
    ],
)
def test_workspace_verdict(
    replicas: int, deployment: bodies.DeploymentBody | None, phase: str, ready: str
) -> None:
    verdict = conditions.workspace(replicas, deployment)
    assert verdict.phase == phase
    assert verdict.condition("Ready").status == ready
    assert {c.type for c in verdict.conditions} == {"Ready", "Progressing", "Degraded"}
    assert (verdict.condition("Degraded").status == "True") == (phase == "Degraded")


def test_datastore_verdict() -> None:
    assert conditions.datastore(True, "s").condition("Validated").status == "True"
    denied = conditions.datastore(False, "s")
    assert denied.condition("Denied").status == "True"
    assert denied.condition("Denied").reason == "SecretMissing"


def test_a_workspace_naming_a_datastore_it_may_not_use_is_degraded_saying_why() -> None:
    serving = conditions.workspace_pending("X", "y")
    assert conditions.with_datastores(serving, {"orders": "denied"}) is serving  # not reconciled: unchanged
    ready = conditions.Verdict(
        phase="Ready",
        conditions=(
            conditions.Wanted("Ready", "True", "Available", "1/1"),
            conditions.Wanted("Progressing", "False", "RolloutComplete", "done"),
            conditions.Wanted("Degraded", "False", "Available", "1/1"),
        ),
    )
    assert conditions.with_datastores(ready, {}) is ready
    degraded = conditions.with_datastores(ready, {"orders": "claim 'o' is Denied"})
    assert degraded.phase == "Degraded"
    assert degraded.condition("Ready") == ready.condition("Ready")
    assert degraded.condition("Degraded") == conditions.Wanted(
        "Degraded", "True", conditions.DATASTORE_NOT_USABLE, "datastore 'orders': claim 'o' is Denied"
    )
