"""The workspace registry: slugs, their tenant ids, soft unregistering.

All workspaces of a process share one database; a workspace's rows carry its ``tenant_id``,
which is the registry row's uuid. Unregistering only sets ``deleted_at``, so registering the
same slug again restores the same ``tenant_id`` and with it the data. ``default`` is seeded at
every boot and cannot be deleted.

Requests resolve their slug through :class:`Registry`, a small cache in front of the table: a
hit younger than ``ttl`` seconds is trusted, a miss always asks the database, so a slug
registered a moment ago (by this process or another) works at once, and an unregistered one
stops working within ``ttl``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from dap.config import names
from dap.server import errors
from dap.server.storage import db, tables

SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_SLUG = 63

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.workspaces (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug text NOT NULL UNIQUE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
"""


@dataclass(frozen=True)
class Workspace:
    slug: str
    name: str
    tenant_id: uuid.UUID
    created_at: datetime

    def as_json(self) -> dict[str, str]:
        return {
            "slug": self.slug,
            "name": self.name,
            "tenant_id": str(self.tenant_id),
            "created_at": self.created_at.isoformat(),
        }


def check_slug(slug: str) -> None:
    """Raise ``ValidationFailed`` unless ``slug`` is kebab-case and not a reserved segment."""
    if not SLUG.fullmatch(slug) or len(slug) > MAX_SLUG:
        raise errors.ValidationFailed(
            f"slug {slug!r} must be kebab-case (a-z, 0-9, single dashes), at most {MAX_SLUG} characters",
            code="SVC.WORKSPACE.INVALID_SLUG",
            errors=[errors.FieldProblem("slug", "must be kebab-case")],
        )
    if slug in names.RESERVED_SLUGS:
        raise errors.ValidationFailed(
            f"slug {slug!r} is a reserved path segment",
            code="SVC.WORKSPACE.RESERVED_SLUG",
            errors=[errors.FieldProblem("slug", "reserved")],
        )


def _row(record: asyncpg.Record) -> Workspace:
    return Workspace(
        slug=record["slug"], name=record["name"], tenant_id=record["id"], created_at=record["created_at"]
    )


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def seed_default(conn: db.Connection) -> None:
    """(Re-)register ``default``: it exists after every boot, even if someone deleted it by hand."""
    await register(conn, names.DEFAULT_WORKSPACE, "Default")


async def register(conn: db.Connection, slug: str, name: str) -> tuple[Workspace, bool]:
    """Register ``slug`` (or restore it); return the workspace and whether it was new or restored."""
    check_slug(slug)
    record = await conn.fetchrow(
        """
        INSERT INTO dap.workspaces (slug, name) VALUES ($1, $2)
        ON CONFLICT (slug) DO UPDATE
            SET name = EXCLUDED.name, updated_at = now(), deleted_at = NULL
        RETURNING id, slug, name, created_at, (xmax = 0) AS inserted,
                  (SELECT deleted_at IS NOT NULL FROM dap.workspaces w WHERE w.slug = $1) AS was_deleted
        """,
        slug,
        name,
    )
    assert record is not None
    created = bool(record["inserted"]) or bool(record["was_deleted"])
    return _row(record), created


async def unregister(conn: db.Connection, slug: str) -> bool:
    """Soft-unregister ``slug``; return whether it was registered. ``default`` is refused."""
    if slug == names.DEFAULT_WORKSPACE:
        raise errors.Conflict("the default workspace cannot be deleted", code="SVC.WORKSPACE.UNDELETABLE")
    status = await conn.execute(
        "UPDATE dap.workspaces SET deleted_at = now() WHERE slug = $1 AND deleted_at IS NULL", slug
    )
    return status.endswith(" 1")


async def list_active(conn: db.Connection) -> list[Workspace]:
    records = await conn.fetch(
        "SELECT id, slug, name, created_at FROM dap.workspaces WHERE deleted_at IS NULL ORDER BY slug"
    )
    return [_row(r) for r in records]


async def find(conn: db.Connection, slug: str) -> Workspace | None:
    record = await conn.fetchrow(
        "SELECT id, slug, name, created_at FROM dap.workspaces WHERE slug = $1 AND deleted_at IS NULL", slug
    )
    return _row(record) if record is not None else None


class Registry:
    """Per-process cache of active workspaces in front of ``dap.workspaces``."""

    def __init__(self, pool: asyncpg.Pool, *, ttl: float = 5.0) -> None:
        self._pool = pool
        self._ttl = ttl
        self._hits: dict[str, tuple[float, Workspace]] = {}

    async def resolve(self, slug: str) -> Workspace:
        """The active workspace ``slug``; raise ``NotFound`` (a problem document) otherwise."""
        cached = self._hits.get(slug)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        if not SLUG.fullmatch(slug) or slug in names.RESERVED_SLUGS:
            raise errors.NotFound(f"no workspace {slug!r}", code="SVC.WORKSPACE.NOT_FOUND")
        async with db.connection(self._pool) as conn:
            workspace = await find(conn, slug)
        if workspace is None:
            self._hits.pop(slug, None)
            raise errors.NotFound(f"no workspace {slug!r}", code="SVC.WORKSPACE.NOT_FOUND")
        self._hits[slug] = (now, workspace)
        return workspace

    def forget(self, slug: str) -> None:
        """Drop ``slug`` from the cache (after this process unregistered or renamed it)."""
        self._hits.pop(slug, None)


async def has_rows(conn: db.Connection, table_names: Sequence[str], tenant: uuid.UUID) -> bool:
    """Whether any of the tables holds a row of ``tenant`` (one statement, stops at the first)."""
    if not table_names:
        return False
    probes = " OR ".join(
        f"EXISTS (SELECT 1 FROM {tables.quote(t)} WHERE tenant_id = $1)" for t in table_names
    )
    return bool(await conn.fetchval(f"SELECT {probes}", tenant))
