"""The cluster registry and placing bindings on clusters (the I/O around ``routing``).

The registry is fed by clusters announcing themselves (``PUT /v1/clusters/{id}``, sent by every
cluster-mode control on each sync) and by operator node-health reports, whose mean CPU becomes the
cluster's load. The workspace count of a cluster is not reported but counted from the
deployments table, which is the region's own truth.

``place`` runs ``routing.choose`` for each binding and stores the result: a cluster, or the
routing error on the binding (``deployments.error``) when no cluster fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dap.control import errors
from dap.control.clusters import routing
from dap.control.ids import ClusterId
from dap.control.storage import store

STANDALONE_CLUSTER = ClusterId("local")
LOAD_WINDOW_SECONDS = 300


async def clusters(conn: store.Executor) -> list[routing.ClusterInfo]:
    rows = await conn.fetch(
        "SELECT c.cluster_id, c.labels, c.status, c.max_workspaces, c.load,"
        " (SELECT count(*) FROM dap_control.deployments d WHERE d.cluster_id = c.cluster_id) AS hosted"
        " FROM dap_control.clusters c ORDER BY c.cluster_id"
    )
    return [
        routing.ClusterInfo(
            cluster_id=ClusterId(r["cluster_id"]),
            labels=dict(r["labels"]),
            status=r["status"],
            workspace_count=int(r["hosted"]),
            max_workspaces=r["max_workspaces"],
            load=float(r["load"]),
        )
        for r in rows
    ]


def decide(
    registry: Mapping[ClusterId, routing.ClusterInfo], bindings: Sequence[store.DeploymentRow]
) -> list[store.DeploymentRow]:
    """Route every binding in workspace order (pure); counts are kept true as they are placed."""
    clusters = dict(registry)
    placed = []
    for binding in sorted(bindings, key=lambda b: b.workspace_id):
        placement = routing.Placement(
            binding.workspace_id, binding.cluster_class, binding.region, binding.requested_cluster
        )
        cluster: ClusterId | None
        try:
            cluster, error = routing.choose(placement, clusters.values(), binding.cluster_id), None
        except errors.NoCandidateError as exc:
            cluster, error = None, exc.detail
        for cid, delta in ((binding.cluster_id, -1), (cluster, +1)):
            if cid is not None and cid in clusters and binding.cluster_id != cluster:
                info = clusters[cid]
                clusters[cid] = dataclasses.replace(info, workspace_count=info.workspace_count + delta)
        placed.append(dataclasses.replace(binding, cluster_id=cluster, error=error))
    return placed


async def place(conn: store.Conn, bindings: Sequence[store.DeploymentRow], *, standalone: bool) -> bool:
    """Route and store every binding; return True when any stored binding changed."""
    if standalone:
        rows = [dataclasses.replace(b, cluster_id=STANDALONE_CLUSTER, error=None) for b in bindings]
    else:
        rows = decide({c.cluster_id: c for c in await clusters(conn)}, bindings)
    changed = False
    # Rows are touched in workspace order so that concurrent registrations cannot deadlock.
    for row in sorted(rows, key=lambda b: b.workspace_id):
        changed = await store.upsert_deployment(conn, row) or changed
    return changed


async def upsert_cluster(
    conn: store.Conn,
    cluster_id: str,
    *,
    labels: Mapping[str, str],
    status: str,
    max_workspaces: int,
    load: float | None,
    declared: bool = False,
) -> None:
    """Record a cluster as announced by its control, or as ``declared`` by a Cluster resource.

    A Cluster resource on the management cluster is what an administrator edits (labels, state,
    maximum), so once one exists a cluster control's own announcement no longer overrides them:
    it still counts as the cluster's heartbeat and load.
    """
    await conn.execute(
        "INSERT INTO dap_control.clusters AS c (cluster_id, labels, status, max_workspaces, load, declared)"
        " VALUES ($1, $2, $3, $4, coalesce($5::double precision, 0), $6)"
        " ON CONFLICT (cluster_id) DO UPDATE SET"
        " labels = CASE WHEN c.declared AND NOT EXCLUDED.declared THEN c.labels ELSE EXCLUDED.labels END,"
        " status = CASE WHEN c.declared AND NOT EXCLUDED.declared THEN c.status ELSE EXCLUDED.status END,"
        " max_workspaces = CASE WHEN c.declared AND NOT EXCLUDED.declared THEN c.max_workspaces"
        " ELSE EXCLUDED.max_workspaces END,"
        " declared = c.declared OR EXCLUDED.declared,"
        " load = coalesce($5::double precision, c.load), last_seen = now()",
        cluster_id,
        dict(labels),
        status,
        max_workspaces,
        load,
        declared,
    )


async def unplaced(conn: store.Executor) -> list[store.DeploymentRow]:
    return [d for d in await store.deployments(conn) if d.cluster_id is None]


async def record_node_health(conn: store.Conn, report: Mapping[str, Any], at: datetime) -> float | None:
    """Store one node report; refresh and return the cluster's load (mean CPU of fresh nodes)."""
    await conn.execute(
        "INSERT INTO dap_control.node_health (cluster_id, node, status, workspaces, cpu, memory, at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (cluster_id, node) DO UPDATE SET"
        " status = EXCLUDED.status, workspaces = EXCLUDED.workspaces, cpu = EXCLUDED.cpu,"
        " memory = EXCLUDED.memory, at = EXCLUDED.at",
        report["cluster"],
        report["node"],
        report["status"],
        report["workspaces"],
        report["cpu"],
        report["memory"],
        at,
    )
    return await cluster_load(conn, report["cluster"])


async def cluster_load(conn: store.Executor, cluster_id: str) -> float | None:
    load: float | None = await conn.fetchval(
        "SELECT avg(cpu) FROM dap_control.node_health WHERE cluster_id = $1"
        " AND at > now() - make_interval(secs => $2)",
        cluster_id,
        LOAD_WINDOW_SECONDS,
    )
    if load is not None:
        await conn.execute(
            "UPDATE dap_control.clusters SET load = $2 WHERE cluster_id = $1", cluster_id, load
        )
    return load


async def record_workspace_status(conn: store.Executor, report: Mapping[str, Any], at: datetime) -> None:
    await conn.execute(
        "INSERT INTO dap_control.workspace_status (workspace_id, cluster_id, phase, conditions, at)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (workspace_id, cluster_id) DO UPDATE SET"
        " phase = EXCLUDED.phase, conditions = EXCLUDED.conditions, at = EXCLUDED.at",
        report["workspace"],
        report["cluster"],
        report["phase"],
        report["conditions"],
        at,
    )


async def workspace_status(conn: store.Executor, workspace: str | None) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT workspace_id, cluster_id, phase, conditions, at FROM dap_control.workspace_status"
        " WHERE $1::text IS NULL OR workspace_id = $1 ORDER BY workspace_id, cluster_id",
        workspace,
    )
    return [
        {
            "workspace": r["workspace_id"],
            "cluster": r["cluster_id"],
            "phase": r["phase"],
            "conditions": r["conditions"],
            "at": r["at"].isoformat(),
        }
        for r in rows
    ]
