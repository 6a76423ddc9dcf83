"""Rules on an entity's fields: names, types and their keys, child rows, copied values, cache, extensions.

Rules on a single field's own keys that the JSON Schema cannot say (``currency`` only on money,
``multiple`` with options) live here next to the cross-references, so that all of a field's rules
read in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from dap.config import durations
from dap.config import manifests as m
from dap.config.enums import (
    FieldType,
)
from dap.config.errors import Problem
from dap.config.fields import Field
from dap.config.specs import Spec
from dap.config.validation import locating

CACHE_TTL_MIN = timedelta(seconds=1)
CACHE_TTL_MAX = timedelta(hours=1)


def field_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        for base, siblings in locating.field_lists(entity.spec):
            for name in locating.duplicates(f.name for f in siblings):
                yield locating.at(
                    spec, entity, base, f"field {name!r} is declared twice; field names are unique"
                )
            for i, field in enumerate(siblings):
                yield from _one_field(
                    spec, entity, f"{base}[{i}]", field, siblings, top=base == "spec.fields"
                )


def _one_field(
    spec: Spec, entity: m.EntityManifest, path: str, field: Field, siblings: tuple[Field, ...], *, top: bool
) -> Iterator[Problem]:
    def problem(sub: str, message: str) -> Problem:
        return locating.at(spec, entity, f"{path}.{sub}" if sub else path, message)

    module = entity.metadata.module
    if top and field.name in locating.SYSTEM_FIELDS:
        yield problem("name", f"{field.name!r} is a system column; choose another field name")
    if field.currency is not None and field.type is not FieldType.MONEY:
        yield problem(
            "currency", "currency applies only to fields of type money; remove it or use type money"
        )
    if field.options and field.type in (FieldType.JSON, FieldType.STRING) and field.multiple is None:
        yield problem("multiple", "a string or json field with options needs multiple: true (a set) or false")
    if field.type is FieldType.ENUM and not (field.enum_values or field.options):
        yield problem("", "an enum field needs enum_values or options")
    scale, precision = field.scale_digits, field.precision
    if scale is not None and precision is not None and scale > precision:
        yield problem("scale", f"scale {scale} exceeds precision {precision}")
    if field.natural_key_rule is not None and not field.natural_key:
        yield problem("natural_key_rule", "natural_key_rule needs natural_key: true on the same field")
    if field.type is FieldType.RELATION:
        if field.relation is None:
            yield problem("relation", "a relation field needs relation.entity (module/name of the target)")
        elif spec.resolve_entity(field.relation.entity, module) is None:
            yield from locating.undeclared_entity(
                spec,
                entity,
                f"{path}.relation.entity",
                field.relation.entity,
                f"relation target {field.relation.entity!r} is not a declared entity",
            )
    elif field.relation is not None:
        yield problem("relation", "relation applies only to fields of type relation")
    if field.type is FieldType.CHILD:
        yield from _child(spec, entity, path, field)
    elif field.child is not None:
        yield problem("child", "child applies only to fields of type child")
    if field.auto_fill is not None:
        yield from _auto_fill(spec, entity, path, field, siblings)


def _child(spec: Spec, entity: m.EntityManifest, path: str, field: Field) -> Iterator[Problem]:
    child = field.child
    if child is None:
        yield locating.at(
            spec, entity, f"{path}.child", "a child field needs child.storage (jsonb or table) and fields"
        )
        return
    if child.entity is not None and spec.resolve_entity(child.entity, entity.metadata.module) is None:
        yield from locating.undeclared_entity(
            spec,
            entity,
            f"{path}.child.entity",
            child.entity,
            f"child entity {child.entity!r} is not a declared entity",
        )
    if child.entity is None and not child.fields:
        yield locating.at(
            spec, entity, f"{path}.child", "a child needs fields (or entity naming the row entity)"
        )
    if (
        child.sequence_field is not None
        and child.fields
        and child.sequence_field not in {f.name for f in child.fields}
    ):
        yield locating.at(
            spec, entity, f"{path}.child.sequence_field", f"{child.sequence_field!r} is not a child field"
        )
    if child.picker is not None and spec.resolve_entity(child.picker.entity, entity.metadata.module) is None:
        yield from locating.undeclared_entity(
            spec,
            entity,
            f"{path}.child.picker.entity",
            child.picker.entity,
            f"{child.picker.entity!r} is not a declared entity",
        )


def _auto_fill(
    spec: Spec, entity: m.EntityManifest, path: str, field: Field, siblings: tuple[Field, ...]
) -> Iterator[Problem]:
    assert field.auto_fill is not None
    source = next((f for f in siblings if f.name == field.auto_fill.from_), None)
    if source is None or source.type is not FieldType.RELATION or source.relation is None:
        yield locating.at(
            spec,
            entity,
            f"{path}.auto_fill.from",
            f"{field.auto_fill.from_!r} must name a relation field of the same row",
        )
        return
    target = spec.resolve_entity(source.relation.entity, entity.metadata.module)
    if target is not None and target.spec.field(field.auto_fill.field) is None:
        yield locating.at(
            spec,
            entity,
            f"{path}.auto_fill.field",
            f"{target.key} has no field {field.auto_fill.field!r} to copy",
        )


def cache_ttl_in_range(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        cache = entity.spec.cache
        if cache is not None and not CACHE_TTL_MIN <= durations.parse(cache.ttl) <= CACHE_TTL_MAX:
            yield locating.at(
                spec, entity, "spec.cache.ttl", f"cache ttl {cache.ttl} must be between 1s and 1h"
            )


def extension_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        extends = entity.spec.extends
        if extends is None:
            continue
        if spec.resolve_entity(extends.target, entity.metadata.module) is None:
            yield from locating.undeclared_entity(
                spec,
                entity,
                "spec.extends.target",
                extends.target,
                f"{extends.target!r} is not a declared entity",
            )
        for i, field in enumerate(entity.spec.fields):
            if field.required:
                yield locating.at(
                    spec,
                    entity,
                    f"spec.fields[{i}].required",
                    "extension fields must not be required (the base entity's writers do not know them); "
                    "remove required: true or validate in extends.validate",
                )
