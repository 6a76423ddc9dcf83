"""Derivation plans: what a write of each entity derives and checks, compiled once per spec.

A :class:`Plan` is built when the catalog is built: expressions parsed, computed fields ordered by
their dependencies, auto_fill sources resolved to tables and columns, natural keys and the
conditions of the standard actions collected. ``dap.server.documents.deriving`` applies it to
each write; keeping the compiled plan here lets the catalog hold it without depending on the
layer that executes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from dap.config.entities import EntitySpec
from dap.config.enums import REST_ACTIONS, FieldType, StandardAction
from dap.config.expressions import Expression
from dap.config.fields import Field
from dap.server.catalog import checking
from dap.server.storage import numbering, tables

# the standard actions whose re-declared conditions the server checks (custom ones run elsewhere)
GUARDED_ACTIONS = frozenset(
    {str(a) for a in REST_ACTIONS} | {str(StandardAction.SUBMIT), str(StandardAction.CANCEL)}
)


@dataclass(frozen=True)
class AutoFill:
    field: str  # the field filled
    source: str  # the relation field (same row) whose record is read
    table: str  # that relation's target table
    column: str  # the column of the copied field in the target table


@dataclass(frozen=True)
class RowPlan:
    """What one row (the record itself, or one row of a child field) derives and checks."""

    fields: Mapping[str, Field]
    computed: tuple[tuple[str, checking.Compiled], ...] = ()  # dependency order
    auto_fill: tuple[AutoFill, ...] = ()
    required_when: tuple[tuple[str, checking.Compiled], ...] = ()
    readonly_when: tuple[tuple[str, checking.Compiled], ...] = ()
    rules: tuple[checking.Rule, ...] = ()
    sequence: str | None = None  # child rows: the field ordering the rows

    @functools.cached_property  # a frozen plan's answer, asked by every write
    def active(self) -> bool:
        return bool(
            self.computed
            or self.auto_fill
            or self.required_when
            or self.readonly_when
            or self.rules
            or self.sequence
        )


@dataclass(frozen=True)
class Condition:
    check: checking.Compiled
    message: str
    path: str


@dataclass(frozen=True)
class Plan:
    record: RowPlan
    rows: Mapping[str, RowPlan] = field(default_factory=dict)  # child field -> its rows' plan
    natural_keys: tuple[numbering.NaturalKey, ...] = ()
    conditions: Mapping[str, tuple[Condition, ...]] = field(default_factory=dict)  # action -> guards
    reads_rows: frozenset[str] = frozenset()  # child fields read by record-level expressions

    @functools.cached_property  # a frozen plan's answer, asked by every write
    def active(self) -> bool:
        """Whether a write of this entity has anything to derive or check (else it skips all of this)."""
        return bool(
            self.record.active
            or any(p.active for p in self.rows.values())
            or self.natural_keys
            or self.conditions
        )


NOTHING = Plan(RowPlan(MappingProxyType({})))


def _ordered(computed: list[tuple[str, checking.Compiled]]) -> tuple[tuple[str, checking.Compiled], ...]:
    """Formulas after the computed fields they read (declaration order otherwise; cycles as declared)."""
    names = {name for name, _ in computed}
    needs = {
        name: {r.partition(".")[0] for r in c.references()} & (names - {name})
        if isinstance(c, Expression)
        else set()
        for name, c in computed
    }
    done: list[tuple[str, checking.Compiled]] = []
    left = list(computed)
    while left:
        ready = [item for item in left if not needs[item[0]] - {n for n, _ in done}]
        if not ready:  # a cycle: the validator does not forbid it; evaluate as declared
            ready = left[:1]
        done.append(ready[0])
        left.remove(ready[0])
    return tuple(done)


def row_plan(
    fields: Sequence[Field],
    module: str,
    table_of: Callable[[str], tables.Table | None],
    *,
    sequence: str | None = None,
) -> RowPlan:
    live = {f.name: f for f in fields if not f.removed}
    fills = []
    for f in live.values():
        source = live.get(f.auto_fill.from_) if f.auto_fill is not None else None
        if f.auto_fill is None or source is None or source.relation is None or source.multiple:
            continue
        target = table_of(tables.resolve_ref(source.relation.entity, module))
        column = target.column_for(f.auto_fill.field) if target is not None else None
        if target is not None and column is not None:
            fills.append(AutoFill(f.name, source.name, target.name, column.name))
    return RowPlan(
        fields=MappingProxyType(live),
        computed=_ordered(
            [(f.name, checking.compile_expression(f.computed.formula)) for f in live.values() if f.computed]
        ),
        auto_fill=tuple(fills),
        required_when=tuple(
            (f.name, checking.compile_expression(f.required_when)) for f in live.values() if f.required_when
        ),
        readonly_when=tuple(
            (f.name, checking.compile_expression(f.readonly_when)) for f in live.values() if f.readonly_when
        ),
        rules=tuple(checking.rule_of(f.name, r) for f in live.values() for r in f.rules),
        sequence=sequence,
    )


def _sequence_of(f: Field, rows: tuple[Field, ...]) -> str | None:
    """The sequence field of a child: declared, or a row field named ``idx`` (the key column)."""
    assert f.child is not None
    if f.child.sequence_field is not None:
        return f.child.sequence_field
    return "idx" if any(r.name == "idx" for r in rows) else None


def _references(plan: RowPlan, conditions: Mapping[str, tuple[Condition, ...]]) -> set[str]:
    compiled = [c for _, c in plan.computed + plan.required_when + plan.readonly_when]
    compiled += [r.check for r in plan.rules if isinstance(r.check, Expression)]
    compiled += [c.check for guards in conditions.values() for c in guards]
    return {ref.partition(".")[0] for c in compiled if isinstance(c, Expression) for ref in c.references()}


def plan_for(
    spec: EntitySpec,
    module: str,
    entities: Mapping[str, EntitySpec],
    table_of: Callable[[str], tables.Table | None],
) -> Plan:
    """The derivation plan of one entity; ``table_of`` gives an entity's main table by ``module/name``."""
    record = row_plan(spec.fields, module, table_of)
    rows = {}
    for f in spec.fields:
        if f.removed or f.type is not FieldType.CHILD or f.child is None:
            continue
        child_fields = tables.child_fields(f, module, entities)
        rows[f.name] = row_plan(child_fields, module, table_of, sequence=_sequence_of(f, child_fields))
    conditions = {
        a.name: tuple(
            Condition(
                checking.compile_expression(c.script or c.expression or ""),
                c.message or f"the condition {c.script or c.expression} of {a.name} is not met",
                c.field or a.name,
            )
            for c in a.conditions
        )
        for a in spec.actions
        if a.conditions and a.name in GUARDED_ACTIONS
    }
    keys = tuple(k for f in record.fields.values() if (k := numbering.key_of(f)) is not None)
    plan = Plan(
        record=record,
        rows=MappingProxyType(rows),
        natural_keys=keys,
        conditions=MappingProxyType(conditions),
        reads_rows=frozenset(_references(record, conditions) & set(rows)),
    )
    return plan if plan.active else NOTHING
