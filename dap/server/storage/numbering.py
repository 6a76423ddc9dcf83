"""Natural keys: who supplies them, how a pattern renders, and the per-tenant counters behind them.

A field with ``natural_key: true`` is a record's business identifier (``PO-2024-00042``). Its
``natural_key_entry`` says who supplies it: ``engine`` (the server generates it from
``natural_key_rule.pattern``; a client value is refused), ``person`` (the client must send it) or
``engine_unless_person`` (the client's value when given, else generated). Without an explicit entry
a field with a rule is ``engine`` and one without is ``person``; ``engine`` without a rule numbers
with the bare counter ``{#}``.

Counters live in ``dap.natural_key_counters``, one row per tenant, table, field and period (the year
for ``reset: yearly``, ``YYYY-MM`` for monthly, empty for never). :func:`next_number` increments
the row with ``INSERT … ON CONFLICT DO UPDATE … RETURNING`` inside the create's transaction, so
the row stays locked until that transaction ends: concurrent creates queue on it and get
consecutive numbers, and a create that rolls back gives its number back (no gaps). The period and
the date parts of the key come from the transaction's clock in UTC, the same ``now()`` that fills
``created_at``.

Everything but :func:`ensure_schema`, :func:`next_number` and :func:`assign` is pure.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dap.config.enums import NaturalKeyEntry
from dap.config.fields import NATURAL_KEY_TOKEN, Field

if TYPE_CHECKING:
    import uuid

    from dap.server.storage import db

BARE_COUNTER = "{#}"

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.natural_key_counters (
    tenant_id uuid NOT NULL,
    table_name text NOT NULL,
    field text NOT NULL,
    period text NOT NULL,
    value bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, table_name, field, period)
);
"""

# One statement: increment (or start) the counter of the current period and say which day it is.
NEXT_NUMBER = """
INSERT INTO dap.natural_key_counters AS c (tenant_id, table_name, field, period, value)
VALUES ($1, $2, $3, CASE $4
    WHEN 'yearly' THEN to_char(now() AT TIME ZONE 'UTC', 'YYYY')
    WHEN 'monthly' THEN to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM')
    ELSE '' END, 1)
ON CONFLICT (tenant_id, table_name, field, period)
    DO UPDATE SET value = c.value + 1, updated_at = now()
RETURNING c.value, (now() AT TIME ZONE 'UTC')::date AS day
"""


@dataclass(frozen=True)
class NaturalKey:
    """How one natural-key field of an entity gets its value."""

    field: str
    entry: NaturalKeyEntry
    pattern: str  # what the engine renders (BARE_COUNTER when no rule is declared)
    reset: str  # never, yearly, monthly

    @property
    def generated(self) -> bool:
        """Whether the server may generate the value."""
        return self.entry is not NaturalKeyEntry.PERSON


def entry_of(f: Field) -> NaturalKeyEntry:
    if f.natural_key_entry is not None:
        return f.natural_key_entry
    return NaturalKeyEntry.ENGINE if f.natural_key_rule is not None else NaturalKeyEntry.PERSON


def generates(f: Field) -> bool:
    """Whether the server fills ``f`` when the client leaves it out (its ``required`` waits for that)."""
    return f.natural_key and entry_of(f) is not NaturalKeyEntry.PERSON


def refuses_input(f: Field, *, partial: bool) -> bool:
    """Whether a client value of ``f`` is refused: no natural key changes, engine keys are the server's."""
    return f.natural_key and (partial or entry_of(f) is NaturalKeyEntry.ENGINE)


def key_of(f: Field) -> NaturalKey | None:
    if not f.natural_key:
        return None
    rule = f.natural_key_rule
    return NaturalKey(
        field=f.name,
        entry=entry_of(f),
        pattern=rule.pattern if rule is not None else BARE_COUNTER,
        reset=rule.reset if rule is not None else "never",
    )


def period(reset: str, day: dt.date) -> str:
    """The counter's period for ``day`` (what ``NEXT_NUMBER`` computes in SQL, for tests and tools)."""
    if reset == "yearly":
        return f"{day.year:04d}"
    if reset == "monthly":
        return f"{day.year:04d}-{day.month:02d}"
    return ""


def render(pattern: str, number: int, day: dt.date) -> str:
    """``PO-{YYYY}-{#####}`` with 42 on 2024-05-01 → ``PO-2024-00042`` (wider numbers just grow)."""

    def token(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("#"):
            return str(number).zfill(len(name))
        return {
            "YYYY": f"{day.year:04d}",
            "YY": f"{day.year % 100:02d}",
            "MM": f"{day.month:02d}",
            "DD": f"{day.day:02d}",
        }[name]

    return NATURAL_KEY_TOKEN.sub(token, pattern)


# --- I/O -----------------------------------------------------------------------------------------


async def ensure_schema(conn: db.Connection) -> None:
    await conn.execute(DDL)  # CREATE ... IF NOT EXISTS only: no lock on an existing table


async def next_number(
    conn: db.Connection, *, tenant: uuid.UUID, table: str, field: str, reset: str
) -> tuple[int, dt.date]:
    """The counter's next number and the (UTC) day it was taken on; call inside the create's transaction."""
    row = await conn.fetchrow(NEXT_NUMBER, tenant, table, field, reset)
    assert row is not None
    return int(row["value"]), row["day"]


async def assign(
    conn: db.Connection,
    keys: tuple[NaturalKey, ...],
    values: MutableMapping[str, Any],
    *,
    tenant: uuid.UUID,
    table: str,
) -> None:
    """Generate every key of ``keys`` into ``values`` (``engine_unless_person`` only when missing)."""
    for key in keys:
        if key.entry is NaturalKeyEntry.ENGINE_UNLESS_PERSON and values.get(key.field) not in (None, ""):
            continue
        number, day = await next_number(conn, tenant=tenant, table=table, field=key.field, reset=key.reset)
        values[key.field] = render(key.pattern, number, day)
