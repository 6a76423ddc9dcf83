"""Summary entities: running totals the engine keeps from submitted documents (issue 43).

A ``characteristic: summary`` entity declares ``summary: {source, lines?, group_by, sum}``: the
rows of a submitted ``source`` document (its own row, or the rows of its child field ``lines``)
are grouped by ``group_by`` and each ``sum`` (``add`` minus ``subtract``) is added to the summary
row of that group on submit and taken away on cancel -- in the move's own transaction, so a
summary is never out of step with the documents a reader sees committed. A group without a row
gets one (created by ``dap``).

Concurrent moves touching the same group serialise on a transaction-scoped advisory lock per
group (a new group's insert included), taken in one statement in a fixed order (the keys' hashes
ascending) so that two documents sharing groups cannot deadlock. Nobody else writes a summary:
``guards`` refuses every direct write with 409 ``SVC.PERSIST.CROSS_CATEGORY``.

:func:`apply` is called by ``lifecycle`` (submit, cancel, create-and-submit); the plan of each
source is derived once per catalog (``Resource.derived``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from dap.config.enums import Characteristic
from dap.server.catalog import Catalog, Resource
from dap.server.storage import db, sql, tables

OWNER = "dap"  # created_by and owner of a summary row the engine creates


@dataclass(frozen=True)
class Plan:
    """How one source document moves one summary entity, compiled to SQL."""

    summary: Resource
    deltas: str  # $1 tenant, $2 record id → (lock key, group values..., sums...)
    group: tuple[str, ...]  # summary columns of group_by, in order
    sums: tuple[str, ...]  # summary columns of the sums, in order
    update: str  # $1 tenant, group values, then the sums' deltas


def _plan(summary: Resource, source: Resource) -> Plan:
    decl = summary.spec.summary
    assert decl is not None
    rows = source.children[decl.lines] if decl.lines is not None else source.table
    where = "parent_id = $2" if decl.lines is not None else "id = $2"

    def src(name: str | None) -> str:
        column = rows.column_for(name) if name is not None else None
        return f"COALESCE({tables.quote(column.name)}, 0)" if column is not None else "0"

    def col(table: tables.Table, name: str) -> str:
        column = table.column_for(name)
        assert column is not None, name
        return column.name

    group_src = [tables.quote(col(rows, g)) for g in decl.group_by]
    sums_sql = [f"sum({src(s.add)} - {src(s.subtract)})" for s in decl.sum]
    key = f"hashtextextended({summary.key!r} || json_build_array({', '.join(group_src)})::text, 0)"
    deltas = (
        f"SELECT {key} AS lock_key, {', '.join(group_src)}, {', '.join(sums_sql)} "
        f"FROM {tables.quote(rows.name)} WHERE tenant_id = $1 AND {where} "
        f"GROUP BY {', '.join(group_src)}"
    )
    group = tuple(col(summary.table, g) for g in decl.group_by)
    sums = tuple(col(summary.table, s.field) for s in decl.sum)
    n = 1 + len(group)
    sets = ", ".join(
        f"{tables.quote(c)} = COALESCE({tables.quote(c)}, 0) + ${n + i + 1}::numeric"
        for i, c in enumerate(sums)
    )
    match = " AND ".join(f"{tables.quote(c)} IS NOT DISTINCT FROM ${i + 2}" for i, c in enumerate(group))
    update = (
        f"UPDATE {tables.quote(summary.table.name)} SET {sets}, version = version + 1, updated_at = now() "
        f"WHERE tenant_id = $1 AND {match}"
    )
    return Plan(summary, deltas, group, sums, update)


_PLANS = (__name__, "plans")


def plans(catalog: Catalog, source: Resource) -> tuple[Plan, ...]:
    """The summaries ``source``'s documents move, compiled once per catalog."""
    found: tuple[Plan, ...] | None = source.derived.get(_PLANS)
    if found is None:
        out = []
        for r in catalog.resources.values():
            decl = r.spec.summary
            if r.spec.characteristic is not Characteristic.SUMMARY or decl is None:
                continue
            if tables.resolve_ref(decl.source, r.module) == source.key:
                out.append(_plan(r, source))
        found = source.derived[_PLANS] = tuple(out)
    return found


async def apply(
    conn: db.Connection,
    catalog: Catalog,
    source: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    sign: int,
) -> None:
    """Add (``sign`` 1, a submit) or take away (-1, a cancel) the document ``record_id``'s rows in
    every summary of ``source``, in the caller's transaction."""
    for plan in plans(catalog, source):
        rows = await conn.fetch(plan.deltas, tenant, record_id)
        if not rows:
            continue
        rows = sorted(rows, key=lambda r: r["lock_key"])
        await conn.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k",  # in the array's order
            [r["lock_key"] for r in rows],
        )
        for row in rows:
            groups = [row[i + 1] for i in range(len(plan.group))]
            deltas = [sign * row[1 + len(plan.group) + i] for i in range(len(plan.sums))]
            done = await conn.execute(plan.update, tenant, *groups, *deltas)
            if done.endswith(" 0"):
                values: dict[str, Any] = dict(zip(plan.group, groups, strict=True))
                values.update(zip(plan.sums, deltas, strict=True))
                statement, args = sql.insert(plan.summary.table, tenant, values, owner=OWNER)
                await conn.execute(statement, *args)


BALANCES_DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.period_balances (
    tenant_id uuid NOT NULL,
    period_id uuid NOT NULL,
    entity text NOT NULL,
    grp jsonb NOT NULL,
    sums jsonb NOT NULL,
    PRIMARY KEY (tenant_id, period_id, entity, grp)
);
"""


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, BALANCES_DDL)


def _closing_sql(summary: Resource, source: Resource, date_column: str) -> str:
    """$1 tenant, $2 the period's last day → one row per group: its sums over every document of
    ``source`` submitted and dated on or before that day (the closing balance)."""
    decl = summary.spec.summary
    assert decl is not None
    rows = source.children[decl.lines] if decl.lines is not None else source.table
    alias = "r" if decl.lines is not None else "s"

    def src(name: str | None) -> str:
        column = rows.column_for(name) if name is not None else None
        return f"COALESCE({alias}.{tables.quote(column.name)}, 0)" if column is not None else "0"

    group = []
    for g in decl.group_by:
        column = rows.column_for(g)
        assert column is not None
        group.append(f"{alias}.{tables.quote(column.name)}")
    keys = ", ".join(f"{g!r}, {expr}::text" for g, expr in zip(decl.group_by, group, strict=True))
    sums = ", ".join(f"{s.field!r}, sum({src(s.add)} - {src(s.subtract)})::text" for s in decl.sum)
    joined = (
        f"{tables.quote(rows.name)} r JOIN {tables.quote(source.table.name)} s "
        "ON s.tenant_id = r.tenant_id AND s.id = r.parent_id"
        if decl.lines is not None
        else f"{tables.quote(source.table.name)} s"
    )
    return (
        f"SELECT json_build_object({keys})::jsonb AS grp, json_build_object({sums})::jsonb AS sums "
        f"FROM {joined} WHERE s.tenant_id = $1 AND s.docstatus = 1 AND s.{tables.quote(date_column)} <= $2 "
        f"GROUP BY {', '.join(group)}"
    )


async def close_balances(
    conn: db.Connection, catalog: Catalog, tenant: uuid.UUID, period_id: uuid.UUID, ends: Any, *, date_of: Any
) -> int:
    """Write the closing balances of every summary as of ``ends`` (a period's last day) for
    ``period_id``, replacing any earlier ones; how many group rows. ``date_of(resource)`` names the
    column of a source's transaction date (``None``: the source is not dated, no balance)."""
    await conn.execute(
        "DELETE FROM dap.period_balances WHERE tenant_id = $1 AND period_id = $2", tenant, period_id
    )
    written = 0
    for summary in catalog.resources.values():
        decl = summary.spec.summary
        if summary.spec.characteristic is not Characteristic.SUMMARY or decl is None:
            continue
        source = catalog.resources.get(tables.resolve_ref(decl.source, summary.module))
        column = date_of(source) if source is not None else None
        if source is None or column is None:
            continue
        rows = await conn.fetch(_closing_sql(summary, source, column), tenant, ends)
        await conn.executemany(
            "INSERT INTO dap.period_balances (tenant_id, period_id, entity, grp, sums) "
            "VALUES ($1, $2, $3, $4, $5)",
            [(tenant, period_id, summary.key, r["grp"], r["sums"]) for r in rows],
        )
        written += len(rows)
    return written
