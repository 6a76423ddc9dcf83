"""Snapshot contents: the deployments a snapshot names once promotion rules and freezes apply.

The rules are pure (``promotions``, ``freezes``); this module reads what they need from Postgres in
one repeatable-read transaction (deployments, active artifacts, freezes and their holds, the
evidence of promotion sources) and applies them. Moved out of ``storage.store`` so that the
storage floor knows tables, not the supply-chain rules that decide what a snapshot deploys.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from dap.control.storage import store
from dap.control.supply import freezes, promotions
from dap.control.trust import snapshots


async def snapshot_content(
    conn: store.Executor, *, environment: str = "", now: datetime | None = None
) -> tuple[int, list[snapshots.Deployment]]:
    """The snapshot version and the deployments it names: active artifacts, promotion rules and
    freezes applied (``promotions``, ``freezes``)."""
    async with _maybe_acquire(conn) as c, c.transaction(isolation="repeatable_read", readonly=True):
        version: int = await c.fetchval("SELECT version FROM dap_control.snapshot_state")
        moment: datetime = now or await c.fetchval("SELECT now()")
        rows = await c.fetch(
            "SELECT d.workspace_id, d.app, d.cluster_id, d.handing_over_from, a.artifact_id, a.sha256"
            " FROM dap_control.deployments d"
            " LEFT JOIN dap_control.artifacts a ON a.artifact_id = d.artifact_id AND a.status = 'active'"
            " WHERE d.artifact_id IS NOT NULL ORDER BY d.workspace_id"
        )
        frozen = await c.fetch(
            "SELECT freeze_id, scope, target, reason, created_at, ends_at, lifted_at FROM dap_control.freezes"
            " WHERE lifted_at IS NULL AND ends_at > $1",
            moment,
        )
        promoted = await _promotion_choices(c, [r for r in rows if r["artifact_id"]], moment)
        holds = await c.fetch(
            "SELECT h.freeze_id, h.workspace_id, h.artifact_id, a.sha256, a.status = 'active' AS active"
            " FROM dap_control.freeze_holds h JOIN dap_control.artifacts a USING (artifact_id)"
            " WHERE h.freeze_id = ANY($1::text[])",
            [f["freeze_id"] for f in frozen],
        )
    bindings = []
    for r in rows:
        artifact, sha256 = r["artifact_id"], r["sha256"]
        if r["workspace_id"] in promoted:  # a production workspace of a promotion rule
            choice = promoted[r["workspace_id"]]
            artifact, sha256 = (choice.artifact_id, choice.sha256) if choice else (None, None)
        bindings.append(freezes.Binding(r["workspace_id"], r["app"], r["cluster_id"], artifact, sha256))
    desired = freezes.desired(
        bindings,
        [freezes.Freeze(**dict(f)) for f in frozen],
        {
            (h["freeze_id"], h["workspace_id"]): freezes.Hold(h["artifact_id"], h["sha256"], h["active"])
            for h in holds
        },
        environment=environment,
        now=moment,
    )
    # A workspace handed over between clusters is in both clusters' snapshots until the new one
    # serves it (dap.control.kube.bindings), so the pods of the old one keep their artifact.
    leaving = {r["workspace_id"]: r["handing_over_from"] for r in rows if r["handing_over_from"]}
    kept = [
        snapshots.Deployment(**{**d, "cluster_id": leaving[d["workspace_id"]]})
        for d in desired
        if d["workspace_id"] in leaving
    ]
    return version, desired + kept


async def _promotion_choices(
    conn: store.Conn, rows: list[asyncpg.Record], now: datetime
) -> dict[str, promotions.Candidate | None]:
    """For each production workspace of a promotion rule, the artifact it may run (or None)."""
    rules = await conn.fetch("SELECT app, sources, targets, after_seconds FROM dap_control.promotions")
    out: dict[str, promotions.Candidate | None] = {}
    for rule in rules:
        targets = [r for r in rows if r["app"] == rule["app"] and r["workspace_id"] in rule["targets"]]
        if not targets:
            continue
        artifacts = await conn.fetch(
            "SELECT artifact_id, version, sha256 FROM dap_control.artifacts"
            " WHERE app = $1 AND status = 'active'",
            rule["app"],
        )
        versions = {a["artifact_id"]: a["version"] for a in artifacts}
        # the control's own clock (``received_at``), never the reporter's ``at``: a report dated
        # in the past must not skip the soak, nor one dated ahead postpone it (docs/control.md)
        evidence = await conn.fetch(
            "SELECT record->>'artifact_id' AS artifact_id,"
            " min(received_at) FILTER (WHERE type = 'deploy_status'"
            " AND record->>'phase' IN ('loaded', 'up_to_date')) AS first_running,"
            " coalesce(bool_or(type = 'violation' OR (type = 'deploy_status'"
            " AND record->>'phase' IN ('failed', 'rolled_back'))), false) AS failed"
            " FROM dap_control.evidence WHERE workspace_id = ANY($1::text[])"
            " AND record->>'artifact_id' = ANY($2::text[]) GROUP BY 1",
            list(rule["sources"]),
            list(versions),
        )
        unhealthy = await conn.fetch(
            "SELECT received_at FROM dap_control.evidence WHERE type = 'health'"
            " AND workspace_id = ANY($1::text[]) AND record->>'status' = 'unhealthy'"
            " ORDER BY received_at DESC LIMIT 1000",
            list(rule["sources"]),
        )
        records = {e["artifact_id"]: promotions.Record(e["first_running"], e["failed"]) for e in evidence}
        for target in targets:
            ceiling = versions.get(target["artifact_id"], 0)
            out[target["workspace_id"]] = promotions.promoted(
                [
                    promotions.Candidate(a["artifact_id"], a["version"], a["sha256"])
                    for a in artifacts
                    if a["version"] <= ceiling
                ],
                records,
                [u["received_at"] for u in unhealthy],
                after=timedelta(seconds=rule["after_seconds"]),
                now=now,
            )
    return out


class _maybe_acquire:  # noqa: N801 - used as a context manager like a function
    """``async with`` a connection: the given one, or one acquired from the pool."""

    def __init__(self, conn: store.Executor) -> None:
        self._given = conn
        self._acquired: Any = None

    async def __aenter__(self) -> store.Conn:
        if isinstance(self._given, asyncpg.Pool):
            self._acquired = self._given.acquire()
            conn: store.Conn = await self._acquired.__aenter__()
            return conn
        return self._given

    async def __aexit__(self, *exc: object) -> None:
        if self._acquired is not None:
            await self._acquired.__aexit__(*exc)
