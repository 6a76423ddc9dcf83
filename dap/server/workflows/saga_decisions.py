"""A person's decisions on a parked saga, and how a saga is shown: who may, what happens, the view.

A saga parked as ``outcome_unknown`` or ``compensation_failed`` (``workflows.sagas``) waits for
someone holding its resolve permission (:func:`permit`). :func:`next_of` (pure) says where each
decision sends it; :func:`decide` applies one in a transaction with its audit row, its timeline
entry and the job set ``running`` again, and the engine picks the saga up at its next claim.
:func:`view` is the saga as the API and the UI show it.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from dap.config.sagas import SagaCall, SagaStep
from dap.server import errors
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.catalog import machines as compiled
from dap.server.documents import auditing
from dap.server.storage import db
from dap.server.workflows import filters
from dap.server.workflows import saga_store as store
from dap.server.workflows.sagas import COMPENSATION_FAILED, OUTCOME_UNKNOWN, steps_of

NOT_PARKED = "SVC.SAGA.NOT_PARKED"
NOT_FOUND = "SVC.SAGA.NOT_FOUND"
MAX_LIMIT = 500  # sagas in one page of the inbox


def permission_of(service: str, plan: compiled.ActionPlan) -> str:
    """Who may retry, skip or resolve a parked saga: ``impl.resolve_permission``, else
    ``<module>.<service>.resolve``. Pure."""
    declared = plan.declared
    impl = declared.impl if declared is not None else None
    if impl is not None and impl.resolve_permission:
        return impl.resolve_permission
    return service.replace("/", ".") + ".resolve"


def resolve_permissions(catalog: Catalog) -> list[str]:
    """The resolve permission of every saga action of ``catalog`` (on any protocol), sorted: whoever
    holds one of them has an inbox (the UI shows its link). Pure."""
    plans = [*catalog.services.values(), *catalog.grpc_services.values(), *catalog.ws_services.values()]
    return sorted(
        {permission_of(p.key, a) for p in plans for a in p.actions.values() if steps_of(a) is not None}
    )


OPERATIONS = ("retry", "skip", "resolve")


def next_of(state: str, step: int, op: str, body: dict[str, Any]) -> dict[str, Any]:
    """Where a parked saga goes on ``op`` (the row's changes), or a 409/422. Pure.

    retry: the stuck step or compensation runs again with the same key and fresh retries.
    skip (reason): past the stuck item as though it were not applied (a stuck step: compensate the
    ones before it; a stuck compensation: undone by hand, go on with the rest).
    resolve (reason, applied): someone checked the target. A stuck step applied: go forward (with
    ``result``); not applied: compensate. A stuck compensation applied: go on with the rest.
    """
    if state not in store.PARKED:
        raise errors.Conflict(
            f"this saga is {state}; only a parked saga (outcome_unknown, compensation_failed) is "
            "retried, skipped or resolved",
            code=NOT_PARKED,
        )
    reason = body.get("reason")
    if op != "retry" and (not isinstance(reason, str) or not reason.strip()):
        raise errors.ValidationFailed(
            f'{op} needs a reason: send {{"reason": "what was checked or done"}}',
            code="SVC.SAGA.REASON_REQUIRED",
            errors=[errors.FieldProblem("reason", "is required")],
        )
    forward = state == "outcome_unknown"
    if op == "retry":
        return {"state": "running" if forward else "compensating", "attempts": 0}
    if op == "skip":
        return {"state": "compensating", "step": step - 1, "attempts": 0, "in_flight": False}
    applied = body.get("applied")
    if not isinstance(applied, bool):
        raise errors.ValidationFailed(
            "resolve needs applied: true (the stuck call took effect) or false (it did not)",
            code="SVC.SAGA.RESOLUTION_INVALID",
            errors=[errors.FieldProblem("applied", "must be true or false")],
        )
    if forward and applied:
        return {"state": "running", "step": step + 1, "attempts": 0, "in_flight": False}
    if forward or applied:
        return {"state": "compensating", "step": step - 1, "attempts": 0, "in_flight": False}
    raise errors.ValidationFailed(
        "a compensation that did not take effect is retried (POST …/retry) or skipped with a reason",
        code="SVC.SAGA.RESOLUTION_INVALID",
        errors=[errors.FieldProblem("applied", "false is not a resolution of a failed compensation")],
    )


async def decide(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    saga_id: uuid.UUID,
    op: str,
    body: dict[str, Any],
    request_id: str | None,
) -> asyncpg.Record:
    """A person's retry / skip / resolve of a parked saga, audited; the saga's row after it."""
    async with db.committed(conn):
        row = await conn.fetchrow(
            f"SELECT {store.COLUMNS} FROM dap.sagas WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
            saga_id,
            tenant,
        )
        if row is None:
            raise errors.NotFound("no such saga", code=NOT_FOUND)
        permit(catalog, principal, row)
        changes = next_of(row["state"], row["step"], op, body)
        steps = _steps(catalog, row) or ()
        if op == "resolve" and changes["state"] == "running" and changes["step"] > row["step"]:
            stuck = steps[row["step"]].name if row["step"] < len(steps) else str(row["step"])
            changes["results"] = {**row["results"], stuck: body.get("result")}
        await store.move(conn, saga_id, None, worker=None, lease_until=None, **changes)
        await store.reopen_job(conn, saga_id)
        name = steps[row["step"]].name if 0 <= row["step"] < len(steps) else None
        detail = {
            "reason": body.get("reason"),
            "applied": body.get("applied"),
            "from": row["state"],
            "to": changes["state"],
        }
        await store.log(
            conn, saga_id, row["step"], name, "person", None, op, detail, principal.username or principal.sub
        )
        await conn.execute(
            auditing.INSERT,
            tenant,
            row["service"],
            saga_id,
            f"saga.{op}",
            principal.sub,
            principal.username,
            None,
            {
                "state": [row["state"], changes["state"]],
                "step": [row["step"], changes.get("step", row["step"])],
                "reason": [None, body.get("reason")],
            },
            request_id,
        )
        after = await store.load(conn, saga_id)
    assert after is not None
    return after


def _steps(catalog: Catalog, row: asyncpg.Record) -> tuple[SagaStep, ...] | None:
    service = catalog.any_service(row["service"])
    return steps_of(service.actions.get(row["action"]) if service is not None else None)


def permit(catalog: Catalog, principal: auth.Principal, row: asyncpg.Record) -> None:
    """403 unless ``principal`` holds the saga's resolve permission."""
    service = catalog.any_service(row["service"])
    plan = service.actions.get(row["action"]) if service is not None else None
    needed = (
        permission_of(row["service"], plan)
        if plan is not None
        else row["service"].replace("/", ".") + ".resolve"
    )
    if not catalog.grants.allows(principal.roles, needed):
        raise errors.Forbidden(
            f"retrying, skipping or resolving this saga needs the permission {needed}",
            code="SVC.AUTH.FORBIDDEN",
        )


def may_read(catalog: Catalog, principal: auth.Principal, row: asyncpg.Record) -> bool:
    """The requester of a saga and whoever may resolve it may read it."""
    if principal.sub and row["principal"].get("sub") == principal.sub:
        return True
    try:
        permit(catalog, principal, row)
    except errors.Forbidden:
        return False
    return True


def view(
    catalog: Catalog, row: asyncpg.Record, timeline: list[asyncpg.Record] | None = None
) -> dict[str, Any]:
    """A saga as ``GET /{ws}/api/_sagas/{id}`` shows it: where it is, its steps, its timeline."""
    steps = _steps(catalog, row) or ()
    out: dict[str, Any] = {
        "id": str(row["id"]),
        "service": row["service"],
        "action": row["action"],
        "state": row["state"],
        "step": row["step"],
        "attempts": row["attempts"],
        "in_flight": row["in_flight"],
        "requested_by": row["principal"].get("username"),
        "params": row["params"],
        "results": row["results"],
        "failure": row["failure"],
        "steps": [
            {
                "name": s.name,
                "kind": s.kind,
                "compensation": s.compensation.kind if isinstance(s.compensation, SagaCall) else "none",
                "timeout": s.timeout,
                "retries": s.retries,
                "status_check": s.status is not None,
            }
            for s in steps
        ],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        "finished_at": row["finished_at"].isoformat() if row["finished_at"] else None,
    }
    if row["state"] in store.PARKED:
        out["code"] = OUTCOME_UNKNOWN if row["state"] == "outcome_unknown" else COMPENSATION_FAILED
    if timeline is not None:
        out["timeline"] = [
            {
                "seq": t["seq"],
                "at": t["at"].isoformat(),
                "step": t["step"],
                "name": t["name"],
                "phase": t["phase"],
                "attempt": t["attempt"],
                "outcome": t["outcome"],
                "detail": t["detail"],
                "actor": t["actor"],
            }
            for t in timeline
        ]
    return out


def parse_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise errors.NotFound(f"no saga {raw!r}: a saga id is its job's uuid", code=NOT_FOUND) from exc


async def find(
    pool: asyncpg.Pool,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    raw_id: str,
    service: str | None = None,
) -> dict[str, Any]:
    """One saga with its timeline, protocol-neutral (REST, ws): 404 unless the caller may read it
    (and, when ``service`` is given, unless it is a saga of that service)."""
    saga_id = parse_id(raw_id)
    async with db.connection(pool) as conn:
        row = await store.load(conn, saga_id, tenant)
        if row is None or not may_read(catalog, principal, row) or service not in (None, row["service"]):
            raise errors.NotFound(f"no saga {saga_id} of yours in this workspace", code=NOT_FOUND)
        timeline = await store.timeline(conn, saga_id)
    return view(catalog, row, timeline)


async def settle(
    pool: asyncpg.Pool,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    raw_id: str,
    op: str,
    body: dict[str, Any],
    request_id: str | None,
    service: str | None = None,
) -> dict[str, Any]:
    """A person's ``op`` on a parked saga, protocol-neutral (REST, ws); the saga after it."""
    if not principal.sub:
        raise errors.Unauthorized("deciding on a saga needs 'Authorization: Bearer <token>'")
    if op not in OPERATIONS:
        raise errors.NotFound(f"no saga operation {op!r}; one of {', '.join(OPERATIONS)}", code=NOT_FOUND)
    saga_id = parse_id(raw_id)
    async with db.connection(pool) as conn:
        if service is not None:
            row = await store.load(conn, saga_id, tenant)
            if row is None or row["service"] != service:
                raise errors.NotFound(f"no saga {saga_id} of {service}", code=NOT_FOUND)
        after = await decide(conn, catalog, tenant, principal, saga_id, op, body, request_id)
    return view(catalog, after)


async def inbox(
    pool: asyncpg.Pool,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    wanted: str | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """The operators' inbox, protocol-neutral (REST, gRPC): the sagas in ``wanted`` (default: the
    parked ones) that the caller may read, a page of ``limit`` from ``offset``; 401 to an
    anonymous caller, 422 for a state that is none or a page out of bounds."""
    if not principal.sub:
        raise errors.Unauthorized("the saga inbox needs 'Authorization: Bearer <token>'")
    known = (*store.ACTIVE, *store.PARKED, *store.FINAL)
    if wanted is not None and wanted not in known:
        raise errors.ValidationFailed(
            f"state {wanted!r} is no saga state; one of {', '.join(known)}",
            errors=[errors.FieldProblem("state", "is not a saga state")],
        )
    limit = filters.integer("limit", str(limit), low=1, high=MAX_LIMIT)
    offset = filters.integer("offset", str(offset), low=0, high=filters.MAX_OFFSET)
    async with db.connection(pool) as conn:
        rows = await store.parked(conn, tenant, wanted, limit, offset)
    return [view(catalog, r) for r in rows if may_read(catalog, principal, r)]
