"""The backdate policy of transaction dates. Pure: ``today`` is always passed in.

An entity with ``backdate: {max_days_back, max_days_forward?, override_permission?, date_field?}``
checks its transaction date on create and on an update that changes it:

- older than ``today - max_days_back`` → 422 ``SVC.TXN.BACKDATE_EXCEEDED``, unless the caller
  holds ``override_permission`` (the override lifts only this limit);
- later than ``today + max_days_forward`` (when declared) → 422 ``SVC.TXN.FORWARD_DATE_EXCEEDED``;
  no permission lifts it;
- a transaction entity (``characteristic: transaction``) without the date → 422
  ``SVC.TXN.TRANSACTION_DATE_MISSING``.

The date is ``backdate.date_field``, else the first ``date``/``datetime`` field named
``posting_date``, ``transaction_date`` or ``date`` (``EntitySpec.transaction_date_field``;
validation refuses a policy with neither). A datetime counts by its UTC date, and "today" is the
server's UTC date, so that every process of a deployment draws the line at the same instant.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from dap.config.entities import BackdatePolicy, EntitySpec
from dap.config.enums import Characteristic

MISSING = "SVC.TXN.TRANSACTION_DATE_MISSING"
BACKDATE = "SVC.TXN.BACKDATE_EXCEEDED"
FORWARD = "SVC.TXN.FORWARD_DATE_EXCEEDED"


@dataclass(frozen=True)
class Refusal:
    code: str
    field: str
    message: str


def today() -> dt.date:
    """The date the policy counts from: today in UTC."""
    return dt.datetime.now(dt.UTC).date()


def day_of(value: Any) -> dt.date | None:
    """The calendar date of a date or datetime value (a datetime by its UTC date)."""
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo is None else value.astimezone(dt.UTC)).date()
    if isinstance(value, dt.date):
        return value
    return None


def check(spec: EntitySpec, value: Any, *, today: dt.date, may_override: bool) -> Refusal | None:
    """Judge the transaction date ``value`` (``None``: no date) of an entity with a backdate policy."""
    policy: BackdatePolicy | None = spec.backdate
    f = spec.transaction_date_field()
    if policy is None or f is None:
        return None
    day = day_of(value)
    if day is None:
        if spec.characteristic is Characteristic.TRANSACTION:
            return Refusal(MISSING, f.name, f"{f.name} is the transaction date and is required")
        return None
    earliest = today - dt.timedelta(days=policy.max_days_back)
    if day < earliest and not may_override:
        hint = (
            f" (or ask for the permission {policy.override_permission})" if policy.override_permission else ""
        )
        return Refusal(
            BACKDATE,
            f.name,
            f"{day.isoformat()} is more than {policy.max_days_back} day(s) back; "
            f"use {earliest.isoformat()} or later{hint}",
        )
    if policy.max_days_forward is not None:
        latest = today + dt.timedelta(days=policy.max_days_forward)
        if day > latest:
            return Refusal(
                FORWARD,
                f.name,
                f"{day.isoformat()} is more than {policy.max_days_forward} day(s) ahead; "
                f"use {latest.isoformat()} or earlier",
            )
    return None
