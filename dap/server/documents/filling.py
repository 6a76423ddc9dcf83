"""The I/O shell around ``deriving``: what a write needs from the database, read in its transaction.

``rest`` calls :func:`prepare_create` and :func:`prepare_update` inside the write's transaction,
after the payload was validated and its relations checked, and writes what they return;
``rest`` (delete) and ``documents`` (submit, cancel) call :func:`check_action` on the locked row.
Here the related records of every auto_fill are loaded — one query per target table per request,
whatever the number of rows — the stored child rows are read when record-level expressions use
them, ``deriving`` decides, and ``numbering`` takes the natural keys' numbers last, just before the
insert, so a refused write never takes a number (and a rolled-back one gives it back).

Entities with nothing to derive or check (``Plan.active`` false) pass straight through.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dap.server import errors, fieldvalues
from dap.server.catalog import plans
from dap.server.documents import deriving
from dap.server.storage import db, numbering, sql, tables

if TYPE_CHECKING:
    import asyncpg

    from dap.server.access import auth
    from dap.server.catalog import Resource


def session_of(principal: auth.Principal) -> dict[str, Any]:
    """``session`` in expressions: the caller's attributes, then the fixed names (which win)."""
    return {
        **principal.attrs,
        "username": principal.username,
        "principal_id": principal.sub,
        "sub": principal.sub,
        "roles": list(principal.roles),
        "workspace": principal.workspace,
        "attrs": dict(principal.attrs),
    }


def _raise(problems: list[deriving.Problem]) -> None:
    if not problems:
        return
    codes = {p.code for p in problems}
    code = codes.pop() if len(codes) == 1 else deriving.INVALID
    if code == deriving.CONDITION_FAILED:
        detail = "; ".join(dict.fromkeys(p.message for p in problems))
    else:
        detail = f"{len(problems)} field(s) are invalid"
    raise errors.ValidationFailed(
        detail, code=code, errors=[errors.FieldProblem(p.path, p.message) for p in problems]
    )


# --- related records (auto_fill) ----------------------------------------------------------------


def wanted_related(
    plan: plans.Plan, values: Mapping[str, Any], body: Mapping[str, Any], *, creating: bool
) -> dict[str, tuple[set[str], set[Any]]]:
    """Target table → (columns, ids) that the write's auto_fills may copy from. Pure."""
    wanted: dict[str, tuple[set[str], set[Any]]] = {}

    def want(fill: plans.AutoFill, source: Any) -> None:
        if source is not None:
            columns, ids = wanted.setdefault(fill.table, (set(), set()))
            columns.add(fill.column)
            ids.add(source)

    for fill in plan.record.auto_fill:
        if fill.field not in body and (creating or fill.source in body):
            want(fill, values.get(fill.source))
    for name, rows_plan in plan.rows.items():
        rows = values.get(name) or ()
        sent = deriving.key_rows(body.get(name))
        for i, row in enumerate(rows):
            for fill in rows_plan.auto_fill:
                if fill.field not in (sent[i] if i < len(sent) else row):
                    want(fill, row.get(fill.source))
    return wanted


async def load_related(
    conn: db.Connection, tenant: uuid.UUID, wanted: Mapping[str, tuple[set[str], set[Any]]]
) -> dict[tuple[str, Any], dict[str, Any]]:
    """One query per target table: ``(table, id)`` → column → value, same tenant only."""
    out: dict[tuple[str, Any], dict[str, Any]] = {}
    for table, (columns, ids) in wanted.items():
        cols = sorted(columns)
        statement = (
            f"SELECT id, {', '.join(tables.quote(c) for c in cols)} FROM {tables.quote(table)} "
            "WHERE tenant_id = $1 AND id = ANY($2::uuid[])"
        )
        for row in await conn.fetch(statement, tenant, list(ids)):
            out[(table, row["id"])] = {c: row[c] for c in cols}
    return out


# --- the stored record -----------------------------------------------------------------------------


def _rows_of(rows_plan: plans.RowPlan, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    fields = rows_plan.fields
    return [
        {k: fieldvalues.stored_value(fields[k], v) if k in fields else v for k, v in r.items()} for r in rows
    ]


async def stored_record(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, current: asyncpg.Record
) -> dict[str, Any]:
    """The locked row as field → value, system fields included, with the child rows the plan reads."""
    plan = resource.derivation
    out: dict[str, Any] = {}
    for column in resource.table.columns:
        if column.field is not None and column.field in plan.record.fields:
            value = current[column.name]
            if column.field in plan.rows and isinstance(value, list):  # a child stored as jsonb
                value = _rows_of(plan.rows[column.field], value)
            out[column.field] = value
        elif column.field is None and column.name != "tenant_id":
            out[column.name] = current[column.name]
    if "docstatus" in out:
        out["docstatus"] = tables.DOCSTATUS[out["docstatus"]]
    for name in plan.reads_rows:
        child = resource.children.get(name)
        if child is None:
            continue
        names = {c.name: c.field for c in child.columns if c.field is not None}
        rows = await conn.fetch(*sql.flat(sql.child_rows(child, tenant, [current["id"]])))
        out[name] = _rows_of(plan.rows[name], [{names[k]: r[k] for k in names} for r in rows])
    return out


# --- the three entry points --------------------------------------------------------------------------


async def prepare_create(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    principal: auth.Principal,
    body: Mapping[str, Any],
    values: dict[str, Any],
    *,
    submitting: bool = False,
) -> dict[str, Any]:
    """The values to insert: the payload's, derived ones and generated natural keys; or a 422."""
    plan = resource.derivation
    if not plan.active:
        return values
    session = session_of(principal)
    now = dt.datetime.now(dt.UTC)
    related = await load_related(conn, tenant, wanted_related(plan, values, body, creating=True))
    derived = deriving.derive(
        plan, incoming=values, body=body, stored=None, related=related, session=session, now=now
    )
    _raise(derived.problems)
    ctx = deriving.context(derived.values, session)
    guards = deriving.check_conditions(plan, "create", ctx, now)
    if submitting:
        guards += deriving.check_conditions(plan, "submit", ctx, now)
    _raise(guards)
    out = derived.values
    await numbering.assign(conn, derived.generate, out, tenant=tenant, table=resource.table.name)
    try:
        for key in derived.generate:
            out[key.field] = fieldvalues.convert(plan.record.fields[key.field], out[key.field])
    except fieldvalues.InvalidValueError as exc:
        raise errors.ValidationFailed(
            f"the generated natural key does not fit its field: {exc}",
            errors=[errors.FieldProblem(key.field, str(exc))],
        ) from exc
    return out


async def prepare_update(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    principal: auth.Principal,
    current: asyncpg.Record,
    body: Mapping[str, Any],
    values: dict[str, Any],
) -> dict[str, Any]:
    """The values to write over the locked ``current`` row (its update guards checked first); or a 422."""
    plan = resource.derivation
    if not plan.active:
        return values
    session = session_of(principal)
    now = dt.datetime.now(dt.UTC)
    stored = await stored_record(conn, resource, tenant, current)
    _raise(deriving.check_conditions(plan, "update", deriving.context(stored, session), now))
    related = await load_related(conn, tenant, wanted_related(plan, values, body, creating=False))
    derived = deriving.derive(
        plan, incoming=values, body=body, stored=stored, related=related, session=session, now=now
    )
    _raise(derived.problems)
    return derived.values


async def check_action(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    principal: auth.Principal,
    current: asyncpg.Record,
    action: str,
) -> None:
    """The re-declared conditions of ``action`` (delete, submit, cancel) on the locked row; or a 422."""
    plan = resource.derivation
    if action not in plan.conditions:
        return
    session = session_of(principal)
    stored = await stored_record(conn, resource, tenant, current)
    now = dt.datetime.now(dt.UTC)
    _raise(deriving.check_conditions(plan, action, deriving.context(stored, session), now))


def check_guards(plan: plans.Plan, action: str, values: Mapping[str, Any], principal: auth.Principal) -> None:
    """The compiled conditions of ``action`` in ``plan`` on ``values`` (a custom action's record and
    params, ``workflows``); 422 ``SVC.VALIDATE.CONDITION_FAILED`` with the declared messages."""
    now = dt.datetime.now(dt.UTC)
    _raise(deriving.check_conditions(plan, action, deriving.context(values, session_of(principal)), now))
