"""A workspace's declared accounting calendar (``Workspace.spec.periods``, ``workflows.calendars``):
the periods from ``from`` up to the current one exist after boot, a second boot adds only what is
missing, a period created through the API is kept (the overlapping month skipped), a bad ``from``
is refused with its file and path, and every created period has its audit row. And the seed rows
that close a period (``entity: periods``, ``workflows.seeding_periods``) after the entries dated
in it: once, with its reason; a bad row names its file, line and field."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from dap import config
from dap.config.errors import SpecError
from dap.config.platform import PeriodCalendar
from dap.server import state
from dap.server.catalog import Catalog
from dap.server.storage import db, workspaces
from dap.server.workflows import calendars, periods, seeding, seeds

from .conftest import running, token

ENTITY = """
apiVersion: dap.io/v1
kind: Module
metadata: {name: books}
spec: {title: Books}
---
apiVersion: dap.io/v1
kind: Entity
metadata: {name: entry, module: books}
spec:
  characteristic: transaction
  fields:
    - {name: posting_date, type: date, required: true}
  expose: [{type: rest}]
"""


def workspace(periods: str) -> dict[str, str]:
    return {
        "books.yaml": ENTITY,
        "workspace.yaml": f"""
apiVersion: dap.io/v1
kind: Workspace
metadata: {{name: default}}
spec:
  title: Books
  periods: {periods}
""",
    }


def cal(kind: str, starts: str) -> PeriodCalendar:
    return PeriodCalendar.model_validate({"calendar": kind, "from": starts})


def test_spans_run_from_the_first_day_to_the_period_of_today() -> None:
    months = calendars.spans(cal("monthly", "2025-11-01"), dt.date(2026, 2, 14))
    assert [(s.name, s.starts.isoformat(), s.ends.isoformat()) for s in months] == [
        ("2025-11", "2025-11-01", "2025-11-30"),
        ("2025-12", "2025-12-01", "2025-12-31"),
        ("2026-01", "2026-01-01", "2026-01-31"),
        ("2026-02", "2026-02-01", "2026-02-28"),
    ]
    quarters = calendars.spans(cal("quarterly", "2026-04-01"), dt.date(2026, 12, 31))
    assert [(s.name, s.ends.isoformat()) for s in quarters] == [
        ("2026-Q2", "2026-06-30"),
        ("2026-Q3", "2026-09-30"),
        ("2026-Q4", "2026-12-31"),
    ]
    assert [s.name for s in calendars.spans(cal("yearly", "2024-01-01"), dt.date(2025, 1, 1))] == [
        "2024",
        "2025",
    ]
    assert calendars.spans(cal("monthly", "2027-01-01"), dt.date(2026, 12, 31)) == []  # not begun


@pytest.mark.parametrize(
    ("periods", "said"),
    [
        ("{calendar: monthly, from: 2026-01-15}", "does not begin a monthly period: use the 1st of a month"),
        ("{calendar: quarterly, from: 2026-02-01}", "use the 1st of January, April, July or October"),
        ("{calendar: weekly, from: 2026-01-05}", "monthly"),
        ("{calendar: monthly}", "from"),
    ],
)
def test_a_bad_calendar_is_refused_with_its_file_and_path(periods: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        config.load_files(workspace(periods))
    problems = [str(p) for p in caught.value.problems]
    assert any(p.startswith("workspace.yaml#1 spec.periods") and said in p for p in problems), problems


@pytest.mark.asyncio
async def test_boot_creates_the_months_once_and_keeps_api_periods(pg_dsn: str) -> None:
    today = dt.datetime.now(dt.UTC).date()
    first = (today.replace(day=1) - dt.timedelta(days=40)).replace(day=1)  # two months back
    next_month = (today.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    month_after = (next_month + dt.timedelta(days=32)).replace(day=1)
    catalog = Catalog.from_spec(config.load_files(workspace(f"{{calendar: monthly, from: {first}}}")))
    declared = catalog.workspaces["default"].periods
    assert declared is not None
    expected = [s.name for s in calendars.spans(declared, today)]
    assert len(expected) == 3
    admin = {"Authorization": f"Bearer {token(sub='u-root', username='root', roles=['admin'])}"}
    async with running(pg_dsn, catalog) as r:
        url = f"{r.api}/default/api/_periods"
        async with r.http.get(url, headers=admin) as resp:
            listed: list[dict[str, Any]] = (await resp.json())["data"]
        assert [p["name"] for p in listed] == expected
        assert all(p["state"] == "open" for p in listed)
        # next month, created by hand with another name, overlaps the calendar's next month
        body = {"name": "by hand", "starts": next_month.isoformat(), "ends": next_month.isoformat()}
        async with r.http.post(url, json=body, headers=admin) as resp:
            assert resp.status == 201, await resp.text()
        async with r.http.get(f"{url}/{listed[0]['id']}/_audit", headers=admin) as resp:
            rows = (await resp.json())["data"]
        assert [(row["action"], row["actor"]["username"]) for row in rows] == [("create", "dap-calendar")]
        async with db.connection(r.server.app[state.POOL]) as conn:
            # a later boot (a month on): only what is missing, the API's period kept, no overlap
            assert await calendars.ensure(conn, catalog) == 0
            assert await calendars.ensure(conn, catalog, next_month) == 0
            assert await calendars.ensure(conn, catalog, month_after) == 1
        async with r.http.get(url, headers=admin) as resp:
            names = [p["name"] for p in (await resp.json())["data"]]
        assert names[:3] == expected and names[3] == "by hand" and len(names) == 5


SEED = """
entity: books/entry
records:
  - {_key: early, posting_date: today-62}
---
entity: periods
records:
  - {close: today-62, reason: month end}
"""


@pytest.mark.asyncio
async def test_a_seed_closes_the_period_after_its_entries_once(pg_dsn: str) -> None:
    today = dt.datetime.now(dt.UTC).date()
    catalog = Catalog.from_spec(config.load_files(workspace("{calendar: monthly, from: 2020-01-01}")))
    rows = seeds.parse_files([("90-periods.yaml", SEED)])
    async with running(pg_dsn, catalog) as r, db.connection(r.server.app[state.POOL]) as conn:
        found = await workspaces.find(conn, "default")
        assert found is not None
        tenant = found.tenant_id
        report = await seeding.load(conn, catalog, tenant, rows, today=today)
        assert (report.created, report.actions) == (1, 1)  # the entry, then the close
        day = today - dt.timedelta(days=62)
        closed = await conn.fetchrow(
            "SELECT id, name, state, reason, closed_by FROM dap.periods "
            "WHERE tenant_id = $1 AND starts <= $2 AND ends >= $2",
            tenant,
            day,
        )
        assert (closed["state"], closed["reason"], closed["closed_by"]) == ("closed", "month end", "seed")
        # someone reopens it; the next run does not close it again (and adds nothing)
        actor = periods.Actor(seeding.SEEDER)
        await periods.reopen(conn, tenant, actor, closed["id"], "a late invoice")
        again = await seeding.load(conn, catalog, tenant, rows, today=today)
        assert (again.created, again.actions, again.unchanged) == (0, 0, 2)
        state_now = await conn.fetchval("SELECT state FROM dap.periods WHERE id = $1", closed["id"])
        assert state_now == "open"
        # a day no period holds, and a row without its reason: refused, naming file, line, field
        bad = seeds.parse_files(
            [
                (
                    "91-bad.yaml",
                    "entity: periods\nrecords:\n  - {close: 2019-06-01, reason: x}\n  - {close: today}\n",
                )
            ]
        )
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, catalog, tenant, bad, today=today)
        said = [str(p) for p in caught.value.problems]
        assert any(
            "91-bad.yaml:3" in p and "close" in p and "no period holds 2019-06-01" in p for p in said
        ), said
        assert any("91-bad.yaml:4" in p and "reason" in p for p in said), said
