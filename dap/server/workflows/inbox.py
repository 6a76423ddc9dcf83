"""The approval inbox: the pending approvals a principal may vote on now, across entities.

One statement on ``dap.approvals`` (partial index ``approvals_inbox``: pending rows by tenant and
age): the current step's roles (any, when it names none) and permission, or its escalation roles
once it escalated; not requested by the caller unless the gate allows self-approval; not yet voted
on by the caller in this step. The permissions are decided in Python first (role patterns are
globs): :func:`held` gives the gate permissions of the catalog the caller holds, passed as an
array. The records' display fields are then read with one statement per entity; an approval whose
record is gone or has left the transition's origin states is left out (the next vote on it
cancels it). A page may so hold fewer than ``limit`` items.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from dap.server.access import auth, guards
from dap.server.catalog import Catalog, machines
from dap.server.documents import reading
from dap.server.storage import db, tables
from dap.server.workflows import approvals

_MINE = f"""
SELECT {", ".join("a." + c.strip() for c in approvals.COLUMNS.split(",") if c.strip() != "history")}
FROM dap.approvals a
WHERE a.tenant_id = $1 AND a.status = 'pending'
  AND ($2::text[] IS NULL OR a.entity = ANY($2))
  AND (((cardinality(a.roles) = 0 OR a.roles && $3) AND (a.permission IS NULL OR a.permission = ANY($4)))
       OR (a.escalated_at IS NOT NULL AND a.escalate_to && $3))
  AND (a.requester_sub <> $5 OR a.self_approval)
  AND NOT EXISTS (
      SELECT 1 FROM dap.approval_votes v
      WHERE v.tenant_id = a.tenant_id AND v.approval_id = a.id AND v.step = a.step
        AND v.principal_sub = $5 AND v.voided_at IS NULL)
ORDER BY a.created_at, a.id
LIMIT $6 OFFSET $7
"""


def held(catalog: Catalog, principal: auth.Principal) -> list[str]:
    """The permissions named by the catalog's approval steps that ``principal`` holds."""
    named = {
        step.permission
        for resource in catalog.resources.values()
        for plan in resource.workflow.values()
        if plan.move is not None and plan.move.gate is not None
        for step in plan.move.gate.steps
        if step.permission is not None
    }
    return sorted(p for p in named if catalog.grants.allows(principal.roles, p))


async def mine(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    *,
    entities: Sequence[str] | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """The caller's pending approvals, oldest first, each with its record's display fields."""
    rows = await conn.fetch(
        _MINE,
        tenant,
        list(entities) if entities is not None else None,
        list(principal.roles),
        held(catalog, principal),
        principal.sub,
        limit,
        offset,
    )
    shown = await _display(conn, catalog, tenant, principal, rows)
    out = []
    for row in rows:
        display = shown.get((row["entity"], row["record_id"]))
        if display is None:  # deleted, or moved out of the transition's states: cancelled at the next vote
            continue
        item = approvals.view(row, history=False)
        item["display"] = display
        out.append(item)
    return out


async def _display(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    rows: Sequence[asyncpg.Record],
) -> dict[tuple[str, uuid.UUID], dict[str, Any]]:
    """``(entity, id)`` → the current step's display fields of each record, as a read by
    ``principal`` shows them: a field that needs a permission the caller lacks is left out."""
    wanted: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        wanted.setdefault(row["entity"], []).append(row)
    out: dict[tuple[str, uuid.UUID], dict[str, Any]] = {}
    for entity, items in wanted.items():
        resource = catalog.resources.get(entity)
        if resource is None:
            continue
        found = await conn.fetch(
            f"SELECT {resource.table.select_columns} FROM {tables.quote(resource.table.name)} "
            "WHERE tenant_id = $1 AND id = ANY($2::uuid[])",
            tenant,
            [r["record_id"] for r in items],
        )
        by_id = {r["id"]: reading.present(resource, r) for r in found}
        unreadable = guards.hidden(principal, resource)
        for item in items:
            record = by_id.get(item["record_id"])
            plan = resource.workflow.get(item["action"])
            gate = plan.move.gate if plan is not None and plan.move is not None else None
            if record is None or gate is None or item["step"] >= len(gate.steps):
                continue
            assert plan is not None
            assert plan.move is not None
            if (record.get(machines.STATE) or plan.move.initial) not in plan.move.origins:
                continue
            fields = gate.steps[item["step"]].display_fields
            out[(entity, item["record_id"])] = {f: record.get(f) for f in fields if f not in unreadable}
    return out
