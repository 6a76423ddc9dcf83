"""Derived values and record rules of a write: auto_fill, computed, *_when, field rules, conditions. Pure.

A :class:`~dap.server.catalog.plans.Plan` is built once per entity when the catalog is built
(``catalog.plans``: expressions parsed, computed fields ordered by their dependencies, auto_fill
sources resolved to tables and columns). For every
create and update, :func:`derive` takes the plan, the validated payload (``fieldvalues.coerce_row``'s
values), which keys the payload carried, the stored record (update) and the related records the
I/O shell (``filling``) loaded, and returns the values to write plus the problems found. It never
touches the database, so every rule is tested without a server.

The order of one write:

1. the merged record: the stored values (update) overlaid with the payload; child rows replaced
   when the payload carries them, else the stored rows stand as they are;
2. auto_fill of the record: when the payload sets or changes the relation named in ``from`` and
   does not carry the filled field, the related record's field is copied in;
3. each carried child row: auto_fill (a row that does not carry the field is filled), the
   sequence field (filled 1..n or checked and sorted), then the row's computed fields — a row's
   expressions see the row's fields, then the record's, and the record as ``parent``;
4. the record's computed fields, in dependency order (they may aggregate rows: ``sum(lines.amount)``);
5. checks: ``required`` of auto-filled fields (create), ``required_when`` over the merged record,
   ``readonly_when`` (over the stored record on update, the new one on create), field ``rules``,
   natural keys (engine keys must not come from the client, person keys must, none changes).

Computed results and copied values are converted to the field's type by ``converting``; the
expressions and field rules are compiled and applied by ``checking``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dap.config.enums import NaturalKeyEntry
from dap.config.expressions import ExpressionError
from dap.config.fields import Field
from dap.server import fieldvalues
from dap.server.catalog import checking, plans
from dap.server.storage import numbering

INVALID = "SVC.VALIDATE.INVALID"
FORMULA_FAILED = "SVC.VALIDATE.FORMULA_FAILED"
RULE_FAILED = "SVC.VALIDATE.RULE_FAILED"
CONDITION_FAILED = "SVC.ACTION.CONDITION_FAILED"


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    code: str = INVALID


@dataclass(frozen=True)
class Derived:
    values: dict[str, Any]  # what to write: the payload's values plus every derived one
    problems: list[Problem]
    generate: tuple[numbering.NaturalKey, ...] = ()  # natural keys for the counter to fill


# --- values ----------------------------------------------------------------------------------------


def empty(value: Any) -> bool:
    return value is None or value == "" or value == []


def _ctx_value(value: Any) -> Any:
    """How an expression sees a stored value: uuids as strings, rows as mappings of such values."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list):
        return [_ctx_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _ctx_value(v) for k, v in value.items()}
    return value


def context(values: Mapping[str, Any], session: Mapping[str, Any]) -> dict[str, Any]:
    """The names an expression of a record sees: its fields, system fields and ``session``."""
    ctx = {k: _ctx_value(v) for k, v in values.items()}
    ctx["session"] = session
    return ctx


# --- evaluation ----------------------------------------------------------------------------------


def _compute(
    plan: plans.RowPlan, values: dict[str, Any], ctx: dict[str, Any], now: dt.datetime, prefix: str
) -> list[Problem]:
    problems = []
    for name, formula in plan.computed:
        f = plan.fields[name]
        try:
            value = fieldvalues.convert(f, checking.evaluate(formula, ctx, now))
        except ExpressionError as exc:
            problems.append(
                Problem(
                    f"{prefix}{name}",
                    f"the formula {f.computed and f.computed.formula!r} failed: {exc}",
                    FORMULA_FAILED,
                )
            )
            value = None
        except fieldvalues.InvalidValueError as exc:
            problems.append(
                Problem(f"{prefix}{name}", f"the formula's result does not fit: {exc}", FORMULA_FAILED)
            )
            value = None
        values[name] = value
        ctx[name] = _ctx_value(value)
    return problems


def _when_required(
    plan: plans.RowPlan, values: Mapping[str, Any], ctx: Mapping[str, Any], now: dt.datetime, prefix: str
) -> list[Problem]:
    problems = []
    for name, check in plan.required_when:
        if not empty(values.get(name)):
            continue
        try:
            if checking.condition(check, ctx, now):
                problems.append(Problem(f"{prefix}{name}", f"is required (required_when {check})"))
        except ExpressionError as exc:
            problems.append(Problem(f"{prefix}{name}", f"required_when could not be evaluated: {exc}"))
    return problems


def _rules(
    plan: plans.RowPlan,
    values: Mapping[str, Any],
    ctx: Mapping[str, Any],
    now: dt.datetime,
    prefix: str,
    only: Callable[[str], bool] = lambda _name: True,
) -> list[Problem]:
    problems = []
    for rule in plan.rules:
        if only(rule.field):
            message = checking.problem(rule, values.get(rule.field), ctx, now)
            if message is not None:
                problems.append(Problem(f"{prefix}{rule.field}", message, RULE_FAILED))
    return problems


def _fill(
    fills: tuple[plans.AutoFill, ...],
    fields: Mapping[str, Field],
    values: dict[str, Any],
    wanted: Callable[[plans.AutoFill], bool],
    related: Mapping[tuple[str, Any], Mapping[str, Any]],
    prefix: str,
) -> tuple[list[str], list[Problem]]:
    """Copy each wanted auto_fill into ``values``; the names filled and the problems."""
    filled, problems = [], []
    for fill in fills:
        source = values.get(fill.source)
        if source is None or not wanted(fill):
            continue
        hit = related.get((fill.table, source))
        if hit is None:  # a missing related record is the relation check's to report
            continue
        try:
            values[fill.field] = fieldvalues.convert(fields[fill.field], hit.get(fill.column))
        except fieldvalues.InvalidValueError as exc:
            message = f"the value copied from {fill.source} does not fit: {exc}"
            problems.append(Problem(f"{prefix}{fill.field}", message))
            continue
        filled.append(fill.field)
    return filled, problems


def _sequence(
    plan: plans.RowPlan, name: str, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Fill the sequence field 1..n (no row carries it) or order the rows by it (every row does)."""
    seq = plan.sequence
    if seq is None or not rows:
        return rows, []
    given = [not empty(row.get(seq)) for row in rows]
    if not any(given):
        f = plan.fields.get(seq)
        for i, row in enumerate(rows, 1):
            row[seq] = fieldvalues.convert(f, i) if f is not None else i
        return rows, []
    if not all(given):
        return rows, [
            Problem(name, f"give {seq} in every row or in none (then rows are numbered 1..n in order)")
        ]
    keys = [row[seq] for row in rows]
    if len(set(keys)) != len(keys):
        return rows, [Problem(name, f"{seq} must be unique among the rows")]
    return sorted(rows, key=lambda row: row[seq]), []


def key_rows(rows: Any) -> list[frozenset[str]]:
    """The keys each row object of a payload's child list carried."""
    return [frozenset(r) for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def derive(
    plan: plans.Plan,
    *,
    incoming: Mapping[str, Any],
    body: Mapping[str, Any],
    stored: Mapping[str, Any] | None,
    related: Mapping[tuple[str, Any], Mapping[str, Any]],
    session: Mapping[str, Any],
    now: dt.datetime,
) -> Derived:
    """The values to write for a create (``stored`` is ``None``) or an update, and the problems found.

    ``incoming`` are the validated values (payload plus defaults on create), ``body`` the payload as
    sent (which keys it carried), ``stored`` the record as stored with its child rows (as far as the
    plan reads them), ``related`` the related records by ``(table, id)`` as column → value.
    """
    creating = stored is None
    base: Mapping[str, Any] = stored or {}
    carried = frozenset(body)
    out = dict(incoming)
    merged = {**base, **incoming}
    problems: list[Problem] = []
    rec = plan.record

    def source_changed(fill: plans.AutoFill) -> bool:
        if fill.field in carried:
            return False
        return creating or (fill.source in carried and merged.get(fill.source) != base.get(fill.source))

    filled, fill_problems = _fill(rec.auto_fill, rec.fields, merged, source_changed, related, "")
    problems += fill_problems
    out.update({name: merged[name] for name in filled})

    record_ctx = context(merged, session)
    for name, rows_plan in plan.rows.items():
        if name not in incoming or incoming[name] is None:
            continue
        sent = key_rows(body.get(name))
        rows = [dict(r) for r in incoming[name]]
        for i, row in enumerate(rows):
            prefix = f"{name}[{i}]."
            keys = sent[i] if i < len(sent) else frozenset(row)
            _, fill_problems = _fill(
                rows_plan.auto_fill, rows_plan.fields, row, _not_carried(keys), related, prefix
            )
            problems += fill_problems
            problems += _required_filled(rows_plan, row, prefix)
        rows, seq_problems = _sequence(rows_plan, name, rows)
        problems += seq_problems
        for i, row in enumerate(rows):
            prefix = f"{name}[{i}]."
            ctx = {**record_ctx, **context(row, session), "parent": record_ctx}
            problems += _compute(rows_plan, row, ctx, now, prefix)
            problems += _when_required(rows_plan, row, ctx, now, prefix)
            problems += _rules(rows_plan, row, ctx, now, prefix)
        merged[name] = out[name] = rows

    ctx = context(merged, session)
    problems += _compute(rec, merged, ctx, now, "")
    for name, _ in rec.computed:
        out[name] = merged[name]
    if creating:
        problems += _required_filled(rec, merged, "")
    problems += _when_required(rec, merged, ctx, now, "")
    problems += _read_only(
        rec, incoming, carried, base, ctx if creating else context(base, session), now, creating
    )
    changed = {n for n in out if creating or n in carried or out[n] != base.get(n)}
    problems += _rules(rec, merged, ctx, now, "", lambda n: n in changed)
    problems += _natural_keys(plan, merged, carried, creating)
    generate = tuple(k for k in plan.natural_keys if creating and k.generated)
    return Derived(out, problems, generate)


def _not_carried(keys: frozenset[str]) -> Callable[[plans.AutoFill], bool]:
    """A row fills every auto_fill field it does not carry (rows are replaced as a whole)."""
    return lambda fill: fill.field not in keys


def _required_filled(plan: plans.RowPlan, values: Mapping[str, Any], prefix: str) -> list[Problem]:
    """``required`` of fields the server fills (auto_fill), checked once the fill is done."""
    return [
        Problem(f"{prefix}{fill.field}", f"is required (and {fill.source} gave no value to copy)")
        for fill in plan.auto_fill
        if plan.fields[fill.field].required and empty(values.get(fill.field))
    ]


def _read_only(
    plan: plans.RowPlan,
    incoming: Mapping[str, Any],
    carried: frozenset[str],
    base: Mapping[str, Any],
    ctx: Mapping[str, Any],
    now: dt.datetime,
    creating: bool,
) -> list[Problem]:
    problems = []
    for name, check in plan.readonly_when:
        if name not in carried:
            continue
        before = _default(plan.fields[name]) if creating else base.get(name)
        if incoming.get(name) == before:
            continue
        try:
            if checking.condition(check, ctx, now):
                problems.append(
                    Problem(name, f"is read-only while {check}; leave it out or send its current value")
                )
        except ExpressionError as exc:
            problems.append(Problem(name, f"readonly_when could not be evaluated: {exc}"))
    return problems


def _default(f: Field) -> Any:
    try:
        return fieldvalues.default_of(f)
    except fieldvalues.InvalidValueError:
        return None


def _natural_keys(
    plan: plans.Plan, merged: Mapping[str, Any], carried: frozenset[str], creating: bool
) -> list[Problem]:
    problems = []
    for key in plan.natural_keys:
        if not creating:
            if key.field in carried:
                problems.append(Problem(key.field, "is a natural key and cannot be changed after create"))
        elif (
            key.entry is NaturalKeyEntry.ENGINE and key.field in carried and merged.get(key.field) is not None
        ):
            problems.append(
                Problem(key.field, f"is generated by the server (pattern {key.pattern}); leave it out")
            )
        elif key.entry is NaturalKeyEntry.PERSON and empty(merged.get(key.field)):
            problems.append(Problem(key.field, "is required (a natural key entered by a person)"))
    return problems


def check_conditions(
    plan: plans.Plan, action: str, ctx: Mapping[str, Any], now: dt.datetime
) -> list[Problem]:
    """The failed guards of ``action`` on a record (``ctx`` from :func:`context`)."""
    problems = []
    for condition in plan.conditions.get(action, ()):
        try:
            holds = checking.condition(condition.check, ctx, now)
        except ExpressionError as exc:
            problems.append(
                Problem(
                    condition.path,
                    f"{condition.message} (the condition could not be evaluated: {exc})",
                    CONDITION_FAILED,
                )
            )
            continue
        if not holds:
            problems.append(Problem(condition.path, condition.message, CONDITION_FAILED))
    return problems
