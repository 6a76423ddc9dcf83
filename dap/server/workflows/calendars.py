"""A workspace's declared accounting calendar (``Workspace.spec.periods``; docs/server.md "Periods").

``periods: {calendar: monthly, from: 2026-01-01}`` asks for one period per month from ``from`` up to
the current one. :func:`spans` is the pure list of them; :func:`ensure` creates, at boot, those a
workspace lacks -- idempotently, by name, and skipping a span that overlaps a period created
through the API (that one stays: a date belongs to one period, and people chose it). The creation
takes the same per-workspace lock as ``POST api/_periods`` (``access.periods.CREATING``), so it waits
for writes already checked against "no period" exactly like an API creation, and writes the same
audit row (actor ``dap-calendar``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from dap.config.platform import CALENDAR_MONTHS, PeriodCalendar
from dap.server.access import auth
from dap.server.access import periods as rule
from dap.server.catalog import Catalog
from dap.server.storage import db, workspaces
from dap.server.workflows import periods

SYSTEM = periods.Actor(auth.Principal(sub="dap:calendar", username="dap-calendar", roles=()))


@dataclass(frozen=True)
class Span:
    name: str
    starts: dt.date
    ends: dt.date


def _name(calendar: str, starts: dt.date) -> str:
    if calendar == "monthly":
        return starts.strftime("%Y-%m")
    if calendar == "quarterly":
        return f"{starts.year}-Q{(starts.month - 1) // 3 + 1}"
    return str(starts.year)


def _add_months(day: dt.date, months: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


def spans(calendar: PeriodCalendar, today: dt.date) -> list[Span]:
    """The periods of ``calendar`` from its ``from`` up to the one holding ``today``. Pure."""
    months = CALENDAR_MONTHS[calendar.calendar]
    out: list[Span] = []
    starts = calendar.from_
    while starts <= today:
        nxt = _add_months(starts, months)
        out.append(Span(_name(calendar.calendar, starts), starts, nxt - dt.timedelta(days=1)))
        starts = nxt
    return out


async def ensure_tenant(
    conn: db.Connection, tenant: uuid.UUID, calendar: PeriodCalendar, today: dt.date
) -> list[str]:
    """Create the calendar's missing periods of one workspace; the names created."""
    created: list[str] = []
    async with db.committed(conn):
        await conn.execute(rule.CREATING, tenant)
        for span in spans(calendar, today):
            clash = await conn.fetchval(
                "SELECT 1 FROM dap.periods WHERE tenant_id = $1 "
                "AND (name = $2 OR (starts <= $4 AND ends >= $3))",
                tenant,
                span.name,
                span.starts,
                span.ends,
            )
            if clash is not None:
                continue
            row = await conn.fetchrow(
                f"INSERT INTO dap.periods (tenant_id, name, starts, ends) VALUES ($1, $2, $3, $4) "
                f"RETURNING {periods.COLUMNS}",
                tenant,
                span.name,
                span.starts,
                span.ends,
            )
            assert row is not None
            await periods.record(conn, tenant, SYSTEM, row, "create", {"state": [None, "open"]})
            created.append(span.name)
    return created


async def ensure_workspace(
    conn: db.Connection, catalog: Catalog, slug: str, tenant: uuid.UUID, today: dt.date | None = None
) -> int:
    """:func:`ensure_tenant` for the workspace ``slug`` when its manifest (the Workspace named
    ``slug``) declares a calendar; how many periods were created."""
    spec = catalog.workspaces.get(slug)
    if spec is None or spec.periods is None:
        return 0
    day = today or dt.datetime.now(dt.UTC).date()
    return len(await ensure_tenant(conn, tenant, spec.periods, day))


async def ensure(conn: db.Connection, catalog: Catalog, today: dt.date | None = None) -> int:
    """:func:`ensure_workspace` for every active workspace (``dap serve``'s boot); the same runs when
    a workspace is registered (``web.admin``) and when a pod deploys an artifact (``resource_pod``)."""
    count = 0
    for w in await workspaces.list_active(conn):
        count += await ensure_workspace(conn, catalog, w.slug, w.tenant_id, today)
    return count
