"""Workspace-to-cluster routing (spec rule 5), as a pure chooser.

Given a workspace's placement request and the cluster registry, ``choose`` returns a cluster id
or raises ``errors.NoCandidateError`` whose detail says why every cluster was rejected; the caller
records that on the binding. No I/O: the store gathers the registry, this module decides.

Rules, in order:

1. ``spec.cluster`` set: that cluster, whatever the registry says (a direct assignment bypasses
   class-based routing).
2. Candidates: labels match the requested class (label ``dap.io/cluster-class``) and region
   (label ``dap.io/region``) — only the ones the workspace asks for —, status ``active``, and
   hosting fewer workspaces than the maximum (the workspace itself does not count against the
   cluster that already hosts it).
3. The cluster already hosting the workspace wins when it is a candidate (moving a workspace
   costs a redeploy); otherwise the lowest load, ties broken first by how full the cluster is
   (hosted / maximum: clusters of equal load fill evenly instead of one after the other, which
   ``bench/routing.py`` measures) and then by cluster id, so the answer does not depend on the
   order of the registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dap.control import errors
from dap.control.ids import ClusterId, WorkspaceId

CLASS_LABEL = "dap.io/cluster-class"
REGION_LABEL = "dap.io/region"
ACTIVE = "active"


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: ClusterId
    labels: Mapping[str, str] = field(default_factory=dict)
    status: str = ACTIVE
    workspace_count: int = 0
    max_workspaces: int = 100
    load: float = 0.0


@dataclass(frozen=True)
class Placement:
    """What a workspace asks for (Workspace manifest spec.clusterClass, region, cluster)."""

    workspace_id: WorkspaceId
    cluster_class: str | None = None
    region: str | None = None
    cluster: ClusterId | None = None


def rejection(placement: Placement, cluster: ClusterInfo, current: ClusterId | None) -> str | None:
    """Why ``cluster`` cannot host the workspace, or None when it is a candidate."""
    if placement.cluster_class is not None and cluster.labels.get(CLASS_LABEL) != placement.cluster_class:
        return f"class {cluster.labels.get(CLASS_LABEL)!r} != {placement.cluster_class!r}"
    if placement.region is not None and cluster.labels.get(REGION_LABEL) != placement.region:
        return f"region {cluster.labels.get(REGION_LABEL)!r} != {placement.region!r}"
    if cluster.status != ACTIVE:
        return f"status {cluster.status}"
    hosted = cluster.workspace_count - (1 if cluster.cluster_id == current else 0)
    if hosted >= cluster.max_workspaces:
        return f"full ({hosted}/{cluster.max_workspaces})"
    return None


def candidates(
    placement: Placement, clusters: Iterable[ClusterInfo], current: ClusterId | None = None
) -> list[ClusterInfo]:
    return [c for c in clusters if rejection(placement, c, current) is None]


def choose(
    placement: Placement, clusters: Iterable[ClusterInfo], current: ClusterId | None = None
) -> ClusterId:
    """The cluster for ``placement``; ``current`` is the cluster hosting it now, if any."""
    if placement.cluster is not None:
        return placement.cluster
    registry = list(clusters)
    found = candidates(placement, registry, current)
    if not found:
        if not registry:
            reason = "no cluster is registered"
        else:
            reason = "; ".join(
                f"{c.cluster_id}: {rejection(placement, c, current)}"
                for c in sorted(registry, key=lambda c: c.cluster_id)
            )
        wanted = ", ".join(
            f"{k}={v}" for k, v in (("class", placement.cluster_class), ("region", placement.region)) if v
        )
        raise errors.NoCandidateError(
            f"no cluster for workspace {placement.workspace_id} ({wanted or 'any'}): {reason}"
        )
    for c in found:
        if c.cluster_id == current:
            return c.cluster_id
    return min(found, key=lambda c: (c.load, fill(c), c.cluster_id)).cluster_id


def fill(cluster: ClusterInfo) -> float:
    """How full a cluster is, 0..1 (a candidate always has room, so its maximum is above 0)."""
    return cluster.workspace_count / cluster.max_workspaces if cluster.max_workspaces else 1.0
