"""Applying a migration plan to Postgres and recording it.

The I/O shell around ``migrations.plan``: read the schema registry, plan, refuse or apply, write
every applied step (with its reason) to ``dap.schema_migrations`` and the new table descriptions
to ``dap.schema_registry``; long identifiers and their shortened forms go to
``dap.schema_identifiers``. Everything happens in one transaction under an advisory lock, so two
processes booting at once cannot both migrate, and a failed step changes nothing.

At boot (``allow_destructive=False``) any destructive step refuses the boot and changes nothing;
``dap migrate`` passes ``allow_destructive=True``. Blockers (undeclared destructive changes)
refuse both.

Online steps (``Step.online``: a non-unique index on a table that exists already, and an index
that gives way) are not run here: the migration commits without them, the indexes it describes
are built by ``storage.building`` with ``CREATE INDEX CONCURRENTLY`` (which cannot run in a
transaction), and the drops wait in ``dap.index_drops`` until those builds are done.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping

import asyncpg

from dap.config.entities import EntitySpec
from dap.server import errors
from dap.server.storage import db, migrations
from dap.server.storage.tables import Table

log = logging.getLogger(__name__)

LOCK_KEY = 0x0DA95C4E  # pg_advisory_xact_lock key of schema changes

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.schema_registry (
    table_name text PRIMARY KEY,
    entity text NOT NULL,
    kind text NOT NULL,
    definition jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS dap.schema_identifiers (
    full_name text PRIMARY KEY,
    identifier text NOT NULL,
    entity text NOT NULL
);
CREATE TABLE IF NOT EXISTS dap.schema_migrations (
    id bigserial PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    table_name text NOT NULL,
    kind text NOT NULL,
    safety text NOT NULL,
    description text NOT NULL,
    statements text[] NOT NULL,
    reason text
);
CREATE TABLE IF NOT EXISTS dap.index_drops (
    index_name text PRIMARY KEY,
    table_name text NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT now()
);
"""


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def read_registry(conn: db.Connection) -> dict[str, Table]:
    rows = await conn.fetch("SELECT definition FROM dap.schema_registry")
    out: dict[str, Table] = {}
    for row in rows:
        table = migrations.table_from_json(json.loads(row["definition"]))
        out[table.name] = table
    return out


async def current_plan(
    conn: db.Connection, desired: tuple[Table, ...], entities: Mapping[str, EntitySpec]
) -> migrations.Plan:
    await ensure_schema(conn)
    return migrations.plan(await read_registry(conn), desired, entities)


async def _nothing() -> None:
    return None


def _refusal(plan: migrations.Plan, *, allow_destructive: bool) -> str | None:
    if plan.blockers:
        return (
            f"{len(plan.blockers)} undeclared destructive schema change(s), nothing was changed: "
            + "; ".join(plan.blockers)
        )
    if plan.destructive and not allow_destructive:
        what = "; ".join(s.description for s in plan.destructive)
        return (
            f"{len(plan.destructive)} destructive schema change(s) pending ({what}): "
            "run `dap migrate --spec <dir> --dsn <dsn>` first"
        )
    return None


async def sync(
    conn: db.Connection,
    desired: tuple[Table, ...],
    entities: Mapping[str, EntitySpec],
    *,
    allow_destructive: bool = False,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> migrations.Plan:
    """Bring the schema to ``desired``; return the plan applied. Raise ``DestructivePending``.

    ``confirm`` runs while Postgres executes the plan and must return before anything commits:
    an exception from it rolls the whole change back and propagates. A boot uses it to finish
    checking the manifests on this core while Postgres creates the tables on another.
    """
    await ensure_schema(conn)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        plan = migrations.plan(await read_registry(conn), desired, entities)
        reason = _refusal(plan, allow_destructive=allow_destructive)
        if reason is not None:
            if confirm is not None:  # invalid manifests are the first thing to tell
                await confirm()
            raise errors.DestructivePending(reason)
        # one round trip for the whole plan: 300 entities are ~900 statements
        script = ";\n".join(
            statement for step in plan.steps if not step.online for statement in step.statements
        )
        applied, confirmed = await asyncio.gather(
            conn.execute(script) if script else _nothing(),
            confirm() if confirm is not None else _nothing(),
            return_exceptions=True,
        )
        if isinstance(confirmed, BaseException):  # the manifests were refused: roll back
            raise confirmed
        if isinstance(applied, asyncpg.PostgresError):
            raise errors.MigrationError(
                f"schema change failed, nothing was changed: {applied.__class__.__name__}: {applied}"
            ) from applied
        if isinstance(applied, BaseException):
            raise applied
        await conn.executemany(
            """INSERT INTO dap.schema_migrations
               (table_name, kind, safety, description, statements, reason)
               VALUES ($1, $2, $3, $4, $5, $6)""",
            [
                (s.table, s.kind, str(s.safety), s.description, list(s.statements), s.reason)
                for s in plan.steps
            ],
        )
        # each step and its reason are recorded in dap.schema_migrations; the log gets one line
        # (a first boot of a large spec has thousands of steps)
        if plan.steps:
            log.info(
                "schema changed",
                extra={
                    "ctx": {
                        "steps": len(plan.steps),
                        "destructive": len(plan.destructive),
                        "tables": len({s.table for s in plan.steps}),
                    }
                },
            )
        for step in plan.steps:
            log.debug(
                "schema step applied", extra={"ctx": {"step": step.description, "safety": str(step.safety)}}
            )
        await conn.executemany(
            """INSERT INTO dap.schema_registry (table_name, entity, kind, definition)
               VALUES ($1, $2, $3, $4::jsonb)
               ON CONFLICT (table_name) DO UPDATE
                   SET entity = EXCLUDED.entity, kind = EXCLUDED.kind,
                       definition = EXCLUDED.definition, updated_at = now()""",
            [(t.name, t.entity, t.kind, json.dumps(migrations.table_to_json(t))) for t in desired],
        )
        drops = [(s.index, s.table) for s in plan.steps if s.online and s.kind == "drop_index"]
        if drops:
            await conn.executemany(
                "INSERT INTO dap.index_drops (index_name, table_name) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                drops,
            )
        aliases = [(full, short, t.entity) for t in desired for full, short in t.aliases.items()]
        if aliases:
            await conn.executemany(
                """INSERT INTO dap.schema_identifiers (full_name, identifier, entity) VALUES ($1, $2, $3)
                   ON CONFLICT (full_name) DO UPDATE SET identifier = EXCLUDED.identifier""",
                aliases,
            )
    return plan
