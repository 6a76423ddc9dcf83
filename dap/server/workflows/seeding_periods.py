"""Seeded period closes: the rows of a seed document whose ``entity`` is ``periods``.

A demo of closed books needs a closed month *with documents in it*, and a period closed at boot
would refuse the very seed rows dated in it. So the seed closes it, after the rows above it::

    entity: periods
    records:
      - {close: today-62, reason: Books closed for the month}

``close`` is a day (ISO, ``today`` or ``today±N``, as in every seed row) inside an existing
period -- the workspace's declared calendar (``Workspace.spec.periods``) or one created through
``api/_periods``; that period is closed with ``reason`` exactly as ``POST api/_periods/{id}/close``
closes it (the exclusive lock, the closing balances of every summary, the audit row with the
seeder as actor), in the seed's transaction. The seed key is the period's name: a second run
leaves a period it closed alone (even when someone reopened it since), and a period already
closed counts as unchanged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from dap.server import fieldvalues
from dap.server.access import auth
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.workflows import periods, seeds

ENTITY = "periods"
FIELDS = frozenset({"close", "reason", "final"})
INVALID = "SVC.VALIDATE.INVALID"


def check(row: seeds.Row, today: dt.date) -> tuple[dt.date | None, list[seeds.Problem]]:
    """The day the row closes the period of, or what is wrong with it (pure)."""
    values = row.values
    wrong: list[tuple[str | None, str]] = [
        (k, f"unknown field (close, reason, final) {INVALID}") for k in sorted(set(values) - FIELDS)
    ]
    day: dt.date | None = None
    given = seeds.resolve_dates(values.get("close"), today)
    if given == "today":
        day = today
    elif isinstance(given, str):
        with contextlib.suppress(ValueError):
            day = fieldvalues.date_of(given)
    if day is None:
        wrong.append(("close", f"a day inside the period to close: ISO, today or today±N {INVALID}"))
    reason = values.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        wrong.append(("reason", f"why the period is closed (the audit trail keeps it) {INVALID}"))
    if not isinstance(values.get("final", False), bool):
        wrong.append(("final", f"expected true or false {INVALID}"))
    return (None if wrong else day), [row.problem(path, message) for path, message in wrong]


async def find(conn: db.Connection, tenant: uuid.UUID, day: dt.date) -> tuple[uuid.UUID, str, str] | None:
    """The period holding ``day``: its id, name and state."""
    found = await conn.fetchrow(
        "SELECT id, name, state FROM dap.periods WHERE tenant_id = $1 AND starts <= $2 AND ends >= $2",
        tenant,
        day,
    )
    return None if found is None else (found["id"], found["name"], found["state"])


async def close(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    principal: auth.Principal,
    request_id: str,
    row: seeds.Row,
    period_id: uuid.UUID,
) -> None:
    """Close the period as the API does, with the row's reason (and ``final``)."""
    actor = periods.Actor(principal, request_id)
    reason = str(row.values["reason"]).strip()
    final = bool(row.values.get("final", False))
    await periods.close(conn, catalog, tenant, actor, period_id, reason, final=final)


class SeedRun(Protocol):
    """What a seed run (``seeding``) offers a row of ``entity: periods``."""

    conn: db.Connection
    catalog: Catalog
    tenant: uuid.UUID
    principal: auth.Principal
    request_id: str
    today: dt.date
    known: dict[tuple[str, str], tuple[uuid.UUID, str]]

    @property
    def report(self) -> Any: ...


Remember = Callable[[Any, str, str, uuid.UUID, seeds.Row], Awaitable[None]]


async def seed(run: SeedRun, row: seeds.Row, remember: Remember) -> None:
    """A row of ``entity: periods``: close the period holding a day, once (``remember`` keeps it)."""
    day, problems = check(row, run.today)
    if problems or day is None:
        raise seeds.RowError(problems)
    found = await find(run.conn, run.tenant, day)
    if found is None:
        why = f"no period holds {day}: declare the workspace's calendar (periods:) or create one (_periods)"
        raise seeds.RowError([row.problem("close", why)])
    period_id, name, state = found
    if (ENTITY, name) in run.known or state == "closed":
        run.report.unchanged += 1  # closed by an earlier run (perhaps reopened since), or already
        return
    await close(run.conn, run.catalog, run.tenant, run.principal, run.request_id, row, period_id)
    await remember(run, ENTITY, name, period_id, row)
    run.report.actions += 1
