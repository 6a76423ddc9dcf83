"""What every rule module shares: locating a problem in its file, and the names rules agree on.

``at`` turns a manifest and a JSON path into a ``Problem`` naming file and document;
``undeclared`` reports a reference to a missing manifest unless a document that failed to build
may declare it (``Spec.unbuilt``), so a broken document does not cause a second, false problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta

from dap.config import manifests as m
from dap.config.entities import EntitySpec
from dap.config.enums import (
    REST_ACTIONS,
    StandardAction,
)
from dap.config.errors import Problem
from dap.config.fields import Field
from dap.config.specs import Spec, qualify

Rule = Callable[[Spec], Iterator[Problem]]
SYSTEM_FIELDS = frozenset(
    {"id", "tenant_id", "version", "docstatus", "created_at", "updated_at", "created_by", "owner"}
)
FILTERABLE_SYSTEM_FIELDS = frozenset({"id", "docstatus", "created_at", "updated_at", "owner"})
CACHE_TTL_MIN = timedelta(seconds=1)
CACHE_TTL_MAX = timedelta(hours=1)


def at(spec: Spec, manifest: m.Manifest, path: str, message: str) -> Problem:
    origin = spec.origin(manifest)
    return Problem(origin.file, origin.document, path, message)


def undeclared(
    spec: Spec, owner: m.Manifest, path: str, kind: str, key: str, message: str
) -> Iterator[Problem]:
    """``message`` about a reference to an undeclared ``kind`` ``key``, unless a document that
    failed to build may declare it (then the reference is no mistake of its own)."""
    if not spec.unbuilt.may_declare(kind, key):
        yield at(spec, owner, path, message)


def undeclared_entity(spec: Spec, owner: m.Manifest, path: str, ref: str, message: str) -> Iterator[Problem]:
    return undeclared(spec, owner, path, "Entity", qualify(ref, owner.metadata.module), message)


def duplicates(names: Iterable[str]) -> list[str]:
    return [name for name, count in Counter(names).items() if count > 1]


def entity_actions(entity: EntitySpec) -> set[str]:
    standard = set(REST_ACTIONS)
    if entity.lifecycle:
        standard |= {StandardAction.SUBMIT, StandardAction.CANCEL}
    return {a.name for a in entity.actions} | {str(a) for a in standard}


def field_lists(entity: EntitySpec) -> Iterator[tuple[str, tuple[Field, ...]]]:
    """Every list of sibling fields in an entity, with its JSON path: the entity's, child rows', params'."""
    yield "spec.fields", entity.fields
    for i, field in enumerate(entity.fields):
        if field.child is not None and field.child.fields:
            yield f"spec.fields[{i}].child.fields", field.child.fields
    for i, action in enumerate(entity.actions):
        if action.params is not None:
            yield f"spec.actions[{i}].params.fields", action.params.fields
