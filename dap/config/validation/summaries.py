"""Summary entities and the archive (issue 43): ``characteristic: summary`` with a ``summary``
declaration that the engine can maintain -- a lifecycle ``source`` whose rows (its own, or those
of its child field ``lines``) carry every ``group_by`` field and every summed field, numeric sums
on the summary -- and ``archive`` only where documents of closed periods can be told apart."""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import manifests as m
from dap.config.enums import Characteristic, FieldType
from dap.config.errors import Problem
from dap.config.fields import Field
from dap.config.specs import Spec
from dap.config.validation import locating

NUMERIC = frozenset({FieldType.INTEGER, FieldType.DECIMAL, FieldType.MONEY, FieldType.NUMBER})


def archive_rules(spec: Spec) -> Iterator[Problem]:
    """``archive`` moves documents of closed periods: a dated transaction entity with a lifecycle."""
    for entity in spec.entities.values():
        es = entity.spec
        if es.archive is None:
            continue
        dated = es.transaction_date_field() is not None
        if es.characteristic is not Characteristic.TRANSACTION or not es.lifecycle or not dated:
            yield locating.at(
                spec,
                entity,
                "spec.archive",
                "archive needs characteristic: transaction, lifecycle: true and a transaction date "
                "(posting_date, transaction_date, date or backdate.date_field): only documents of "
                "closed periods are archived",
            )


def summary_rules(spec: Spec) -> Iterator[Problem]:
    yield from archive_rules(spec)
    for entity in spec.entities.values():
        es, decl = entity.spec, entity.spec.summary
        if decl is None:
            if es.characteristic is Characteristic.SUMMARY:
                yield locating.at(
                    spec,
                    entity,
                    "spec.summary",
                    "a characteristic: summary entity needs summary: {source, group_by, sum}: the engine "
                    "maintains it from submitted documents",
                )
            continue
        if es.characteristic is not Characteristic.SUMMARY:
            yield locating.at(spec, entity, "spec.summary", "summary needs characteristic: summary")
        source = spec.resolve_entity(decl.source, entity.metadata.module)
        if source is None:
            yield from locating.undeclared_entity(
                spec, entity, "spec.summary.source", decl.source, f"{decl.source!r} is not a declared entity"
            )
            continue
        yield from _against(spec, entity, source, decl.lines)


def _rows(spec: Spec, source: m.EntityManifest, lines: str | None) -> dict[str, Field] | None:
    if lines is None:
        return {f.name: f for f in source.spec.fields}
    field = source.spec.field(lines)
    if field is None or field.child is None:
        return None
    if field.child.fields:
        return {f.name: f for f in field.child.fields}
    if field.child.entity is not None:
        target = spec.resolve_entity(field.child.entity, source.metadata.module)
        return {f.name: f for f in target.spec.fields} if target is not None else None
    return None


def _against(
    spec: Spec, entity: m.EntityManifest, source: m.EntityManifest, lines: str | None
) -> Iterator[Problem]:
    es = entity.spec
    decl = es.summary
    assert decl is not None
    if not source.spec.lifecycle:
        yield locating.at(
            spec,
            entity,
            "spec.summary.source",
            f"{source.key} has no lifecycle: only submitted documents are summed",
        )
    rows = _rows(spec, source, lines)
    if rows is None:
        yield locating.at(
            spec, entity, "spec.summary.lines", f"{lines!r} is not a child field of {source.key}"
        )
        return
    where = f"{source.key}.{lines}" if lines else source.key
    for i, name in enumerate(decl.group_by):
        if es.field(name) is None:
            yield locating.at(
                spec, entity, f"spec.summary.group_by[{i}]", f"{name!r} is not a field of {entity.key}"
            )
        if name not in rows:
            yield locating.at(
                spec, entity, f"spec.summary.group_by[{i}]", f"{name!r} is not a field of {where}"
            )
    for i, s in enumerate(decl.sum):
        path = f"spec.summary.sum[{i}]"
        target = es.field(s.field)
        if target is None or target.type not in NUMERIC:
            yield locating.at(
                spec, entity, f"{path}.field", f"{s.field!r} is not a numeric field of {entity.key}"
            )
        if s.add is None and s.subtract is None:
            yield locating.at(spec, entity, path, "say what is summed: add, subtract or both (field names)")
        for key in ("add", "subtract"):
            name = getattr(s, key)
            if name is not None and (name not in rows or rows[name].type not in NUMERIC):
                yield locating.at(
                    spec, entity, f"{path}.{key}", f"{name!r} is not a numeric field of {where}"
                )
