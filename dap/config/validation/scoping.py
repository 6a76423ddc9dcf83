"""Rules on row scope: assignments, filters, fixed filters, the create scope and the backdating policy."""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import manifests as m
from dap.config.entities import EntitySpec, FilterSpec
from dap.config.enums import (
    FieldType,
    FilterFrom,
    FilterOp,
)
from dap.config.errors import Problem
from dap.config.specs import Spec
from dap.config.validation import locating


def _filters_exist(
    spec: Spec, owner: m.Manifest, target: EntitySpec, path: str, filters: tuple[FilterSpec, ...]
) -> Iterator[Problem]:
    for i, flt in enumerate(filters):
        if flt.field not in locating.FILTERABLE_SYSTEM_FIELDS and target.field(flt.field) is None:
            yield locating.at(
                spec, owner, f"{path}[{i}].field", f"{flt.field!r} is not a field of the entity"
            )


# Operators a condition with a value from the caller's session may use (row scope).
SESSION_OPS = frozenset(
    {
        FilterOp.EQ,
        FilterOp.NEQ,
        FilterOp.IN,
        FilterOp.NIN,
        FilterOp.GT,
        FilterOp.GTE,
        FilterOp.LT,
        FilterOp.LTE,
        FilterOp.LIKE,
        FilterOp.ILIKE,
    }
)


def _scope_conditions(spec: Spec, entity: m.EntityManifest, es: EntitySpec) -> Iterator[Problem]:
    """Row-scope conditions compare one scalar column with values the server can bind."""
    scoped: list[tuple[str, str, FilterOp | None]] = [
        (f"spec.assignments[{i}]", a.field, None) for i, a in enumerate(es.assignments)
    ]
    for key, flts in (("filters", es.filters), ("fixed_filters", es.fixed_filters)):
        for i, flt in enumerate(flts):
            session = flt.from_ is FilterFrom.SESSION
            if session or (key == "fixed_filters" and flt.from_ is None and flt.value is not None):
                scoped.append((f"spec.{key}[{i}]", flt.field, flt.op if session else None))
    for path, name, op in scoped:
        f = es.field(name)
        if f is not None and (
            f.multiple or f.type in (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD)
        ):
            yield locating.at(
                spec, entity, f"{path}.field", f"{name!r} holds JSON or a list and cannot carry row scope"
            )
        if op is not None and op not in SESSION_OPS:
            yield locating.at(
                spec,
                entity,
                f"{path}.op",
                f"op {op.value!r} cannot take a value from the session; use one of "
                f"{', '.join(sorted(o.value for o in SESSION_OPS))}",
            )


def row_scope_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        es = entity.spec
        for i, assignment in enumerate(es.assignments):
            assigned = es.field(assignment.field)
            if assigned is None:
                yield locating.at(
                    spec, entity, f"spec.assignments[{i}].field", f"{assignment.field!r} is not a field"
                )
            elif assigned.read_only or assigned.computed is not None or "rest" in assigned.exclude:
                yield locating.at(
                    spec,
                    entity,
                    f"spec.assignments[{i}].field",
                    f"{assignment.field!r} is filled from the caller on create, so it must be writable: "
                    "drop read_only, computed or exclude: [rest]",
                )
        yield from _filters_exist(spec, entity, es, "spec.filters", es.filters)
        yield from _filters_exist(spec, entity, es, "spec.fixed_filters", es.fixed_filters)
        yield from _scope_conditions(spec, entity, es)
        scope = es.create_scope
        if scope is not None:
            for key in ("field", "ref_field"):
                if es.field(getattr(scope, key)) is None:
                    yield locating.at(
                        spec, entity, f"spec.create_scope.{key}", f"{getattr(scope, key)!r} is not a field"
                    )
            via = spec.resolve_entity(scope.via, entity.metadata.module)
            if via is None:
                yield from locating.undeclared_entity(
                    spec,
                    entity,
                    "spec.create_scope.via",
                    scope.via,
                    f"{scope.via!r} is not a declared entity",
                )
            elif via.spec.field(scope.via_field) is None:
                yield locating.at(
                    spec, entity, "spec.create_scope.via_field", f"{via.key} has no field {scope.via_field!r}"
                )
            ref = es.field(scope.ref_field)
            if ref is not None and (ref.type is not FieldType.RELATION or ref.multiple):
                yield locating.at(
                    spec,
                    entity,
                    "spec.create_scope.ref_field",
                    f"{scope.ref_field!r} must be a single relation field (to {scope.via}) naming the record "
                    "whose via_field the create must match",
                )
        backdate = es.backdate
        if backdate is not None and es.transaction_date_field() is None:
            if backdate.date_field is not None:
                yield locating.at(
                    spec,
                    entity,
                    "spec.backdate.date_field",
                    f"{backdate.date_field!r} must name a date field",
                )
            else:
                yield locating.at(
                    spec,
                    entity,
                    "spec.backdate",
                    "a backdate policy needs the transaction date: set date_field, or declare a date field "
                    "named posting_date, transaction_date or date",
                )
