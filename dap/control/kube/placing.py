"""Pure logic of Kubernetes-native control: ids, materialised bodies, plans and status.

Nothing here does I/O. The region control (``region``) and the cluster control (``member``) are
thin shells around these functions:

- a management Workspace is one binding in the deployments table, keyed by its name: the
  workspace id a registration names (``dap register --workspace NAME``) is the same binding, so
  the artifact registered for it reaches the cluster the Workspace is placed on;
- ``materialise`` turns a placement pulled from the region into the Workspace body the cluster
  control keeps in its own cluster, marked as its own by labels;
- ``plan`` compares the placements with the Workspaces the cluster control owns: what to create,
  update (spec drifted) and delete (moved away);
- ``management_status`` is what the region writes to the management Workspace's status: the
  cluster, a ``Scheduled`` condition with a reason, and the phase and conditions the cluster
  reported back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dap.config import names

LABEL_PLACED_BY = f"{names.CRD_GROUP}/placed-by"
PLACED_BY = "cluster-control"
LABEL_CLUSTER = f"{names.CRD_GROUP}/cluster"
ANNOTATION_PLACEMENT = f"{names.CRD_GROUP}/placement"
SCHEDULED = "Scheduled"
REASON_PLACED = "Placed"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_DIRECT = "Assigned"
REASON_REFUSED = "Refused"
CONNECTED = "Connected"  # a Cluster's condition: is its cluster control pulling?
REASON_PULLING = "Pulling"
REASON_NEVER_PULLED = "NeverPulled"
REASON_PULLS_STOPPED = "PullsStopped"
PENDING = "Pending"

Body = Mapping[str, Any]


@dataclass(frozen=True)
class Placement:
    """One workspace the region placed on a cluster, as the cluster control pulls it."""

    workspace: str  # the workspace id: the management Workspace's name
    namespace: str  # the management Workspace's namespace
    spec: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "namespace": self.namespace,
            "name": self.workspace,
            "spec": dict(self.spec),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Placement:
        return cls(str(data["workspace"]), str(data["namespace"]), dict(data.get("spec") or {}))


def target(placement: Placement, namespace: str | None) -> tuple[str, str]:
    """Where a placement lives in the member cluster: the given namespace, else the management one."""
    return namespace or placement.namespace, placement.workspace


def materialise(placement: Placement, cluster: str, namespace: str | None) -> dict[str, Any]:
    """The Workspace the cluster control keeps for ``placement``: same spec, marked as its own."""
    ns, name = target(placement, namespace)
    return {
        "apiVersion": names.CRD_API_VERSION,
        "kind": "Workspace",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {LABEL_PLACED_BY: PLACED_BY, LABEL_CLUSTER: cluster},
            "annotations": {ANNOTATION_PLACEMENT: placement.workspace},
        },
        "spec": dict(placement.spec),
    }


def owned_by(body: Body, cluster: str) -> bool:
    labels = body.get("metadata", {}).get("labels") or {}
    return bool(labels.get(LABEL_PLACED_BY) == PLACED_BY and labels.get(LABEL_CLUSTER) == cluster)


def placement_of(body: Body) -> str | None:
    annotations = body.get("metadata", {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_PLACEMENT)
    return str(value) if value else None


@dataclass(frozen=True)
class Plan:
    create: list[dict[str, Any]]
    update: list[dict[str, Any]]  # desired bodies whose spec differs from the live one
    delete: list[tuple[str, str]]  # (namespace, name) of Workspaces that moved away

    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def plan(placements: Iterable[Placement], owned: Iterable[Body], cluster: str, namespace: str | None) -> Plan:
    """Compare the pulled placements with the Workspaces this cluster control owns."""
    desired = {target(p, namespace): materialise(p, cluster, namespace) for p in placements}
    live = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in owned if owned_by(b, cluster)}
    create = [body for key, body in sorted(desired.items()) if key not in live]
    update = [
        body
        for key, body in sorted(desired.items())
        if key in live
        and (
            (live[key].get("spec") or {}) != body["spec"]
            or placement_of(live[key]) != body["metadata"]["annotations"][ANNOTATION_PLACEMENT]
        )
    ]
    delete = sorted(key for key in live if key not in desired)
    return Plan(create, update, delete)


def report_of(body: Body) -> tuple[str, list[dict[str, Any]]] | None:
    """(phase, conditions) of a materialised Workspace, or None before the operator wrote one."""
    status = body.get("status") or {}
    phase = status.get("phase")
    if phase not in names.WORKSPACE_PHASES:
        return None
    return str(phase), [dict(c) for c in status.get("conditions") or []]


def condition(
    type_: str, status: str, reason: str, message: str, now: str, previous: Sequence[Body] = ()
) -> dict[str, Any]:
    """A condition whose transition time moves only when its status changes."""
    before = next((c for c in previous if c.get("type") == type_), None)
    since = before["lastTransitionTime"] if before and before.get("status") == status else now
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


@dataclass(frozen=True)
class Binding:
    """What the region knows of one management Workspace."""

    workspace: str
    namespace: str
    cluster: str | None
    error: str | None
    requested_cluster: str | None = None
    report: tuple[str, list[dict[str, Any]]] | None = None  # from its current cluster
    handing_over_from: str | None = None  # the cluster that keeps it until the new one is Ready


def management_status(binding: Binding, previous: Body, now: str) -> dict[str, Any]:
    """The management Workspace's status: cluster, Scheduled, and what its cluster reported."""
    before = list(previous.get("conditions") or [])
    if binding.cluster is None:
        scheduled = condition(
            SCHEDULED, "False", REASON_UNSCHEDULABLE, binding.error or "no cluster fits", now, before
        )
    else:
        reason = REASON_DIRECT if binding.requested_cluster else REASON_PLACED
        how = "assigned by spec.cluster" if binding.requested_cluster else "routed by the region"
        message = f"{how} to cluster {binding.cluster}"
        if binding.handing_over_from:
            message += f"; {binding.handing_over_from} serves it until it is Ready there"
        scheduled = condition(SCHEDULED, "True", reason, message, now, before)
    if binding.cluster is not None and binding.report is not None:
        phase, reported = binding.report
        conditions = [c for c in reported if c.get("type") != SCHEDULED]
    else:
        phase, conditions = PENDING, []
    return {
        "cluster": binding.cluster,
        "phase": phase,
        "conditions": sorted([scheduled, *conditions], key=lambda c: str(c.get("type"))),
    }


def refused_status(why: str, previous: Body, now: str) -> dict[str, Any]:
    """The status of a management Workspace that got no binding, saying why."""
    before = list(previous.get("conditions") or [])
    scheduled = condition(SCHEDULED, "False", REASON_REFUSED, why, now, before)
    return {"cluster": None, "phase": PENDING, "conditions": [scheduled]}


def connection(
    cluster: str, pulled: datetime | None, now: datetime, stale_after: float, previous: Sequence[Body]
) -> dict[str, Any]:
    """A Cluster's ``Connected`` condition from its last pull: a cluster control with a wrong id
    or a region URL it cannot reach shows here, on the management cluster, rather than nowhere."""
    stamp, last = now.strftime("%Y-%m-%dT%H:%M:%SZ"), pulled.strftime("%Y-%m-%dT%H:%M:%SZ") if pulled else ""
    if pulled is None:
        return condition(
            CONNECTED,
            "False",
            REASON_NEVER_PULLED,
            f"no cluster control has pulled the placements of {cluster}: check that one runs there with "
            f"DAP_CLUSTER_ID={cluster} and a DAP_REGION_URL that reaches this region",
            stamp,
            previous,
        )
    age = (now - pulled).total_seconds()
    if age > stale_after:
        return condition(
            CONNECTED,
            "False",
            REASON_PULLS_STOPPED,
            f"no pull for {int(age)} s (last {last}): the cluster control of "
            f"{cluster} is down or cannot reach the region; its workspaces keep serving what they have",
            stamp,
            previous,
        )
    return condition(
        CONNECTED, "True", REASON_PULLING, "the cluster control pulls its placements", stamp, previous
    )


def same_status(desired: Body, live: Body) -> bool:
    keys = ("cluster", "phase", "conditions")
    return all(desired.get(k) == live.get(k) for k in keys)
