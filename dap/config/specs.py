"""The loaded, immutable manifest set with its lookups.

A ``Spec`` is built once by the loader and then only read: the server derives tables and routes
from it, the control plane hashes the files it came from, the resource pod swaps one ``Spec`` for
another atomically. Each manifest remembers its ``Origin`` so later checks can point at the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from dap.config import manifests as m
from dap.config.enums import DocStatus
from dap.config.errors import Problem
from dap.config.events import EventDecl

M = TypeVar("M", bound=m.Manifest)


@dataclass(frozen=True, slots=True)
class Origin:
    file: str
    document: int


def _index(items: Iterable[tuple[Origin, m.Manifest]], model: type[M]) -> Mapping[str, M]:
    return MappingProxyType({man.key: man for _, man in items if isinstance(man, model)})


@dataclass(frozen=True)
class Unbuilt:
    """What the documents that failed to build would have declared, for checking a partial spec.

    The loader runs the cross-document rules even when some documents are broken, so one run
    reports every problem; a reference to a broken document is no second mistake, so the rules
    ask :meth:`may_declare` before calling a name undeclared. ``unknown`` is set when a broken
    document's kind or name cannot be read (say a YAML syntax error): it might declare anything.
    """

    keys: frozenset[tuple[str, str]] = frozenset()  # (kind, key) as Manifest.key spells it
    unknown: bool = False

    def may_declare(self, kind: str, key: str) -> bool:
        return self.unknown or (kind, key) in self.keys


@dataclass(frozen=True)
class Spec:
    manifests: tuple[m.Manifest, ...]
    origins: Mapping[tuple[str, str], Origin]
    warnings: tuple[Problem, ...] = ()
    unbuilt: Unbuilt = Unbuilt()  # empty for every spec a loader returns
    modules: Mapping[str, m.ModuleManifest] = field(init=False)
    entities: Mapping[str, m.EntityManifest] = field(init=False)
    services: Mapping[str, m.ServiceManifest] = field(init=False)
    apps: Mapping[str, m.AppManifest] = field(init=False)
    pages: Mapping[str, m.PageManifest] = field(init=False)
    forms: Mapping[str, m.FormManifest] = field(init=False)
    tables: Mapping[str, m.TableManifest] = field(init=False)
    kanbans: Mapping[str, m.KanbanManifest] = field(init=False)
    listings: Mapping[str, m.ListingManifest] = field(init=False)
    approval_inboxes: Mapping[str, m.ApprovalInboxManifest] = field(init=False)
    dashboards: Mapping[str, m.DashboardManifest] = field(init=False)
    workspaces: Mapping[str, m.WorkspaceManifest] = field(init=False)
    environments: Mapping[str, m.EnvironmentManifest] = field(init=False)
    datastores: Mapping[str, m.DatastoreManifest] = field(init=False)
    configs: Mapping[str, m.ConfigManifest] = field(init=False)
    roles: Mapping[str, m.RoleManifest] = field(init=False)

    def __post_init__(self) -> None:
        located = [(self.origins[(man.kind, man.key)], man) for man in self.manifests]
        for attribute, model in _ATTRIBUTES.items():
            object.__setattr__(self, attribute, _index(located, model))

    def origin(self, manifest: m.Manifest) -> Origin:
        return self.origins[(manifest.kind, manifest.key)]

    def entity(self, module: str, name: str) -> m.EntityManifest | None:
        return self.entities.get(f"{module}/{name}")

    def entities_of(self, module: str) -> tuple[m.EntityManifest, ...]:
        return tuple(e for e in self.entities.values() if e.metadata.module == module)

    def resolve_entity(self, ref: str, module: str | None) -> m.EntityManifest | None:
        """Find ``module/name``, ``module.name`` or (within ``module``) ``name``."""
        return self.entities.get(qualify(ref, module))

    def resolve(self, table: Mapping[str, M], ref: str, module: str | None) -> M | None:
        """Find a module-scoped manifest of any kind by reference, as ``resolve_entity`` does."""
        return table.get(qualify(ref, module))

    def events_of(self, entity_key: str) -> Mapping[str, EventDecl]:
        """The events an entity declares, by name."""
        entity = self.entities.get(entity_key)
        return MappingProxyType({e.name: e for e in entity.spec.events} if entity else {})

    def states_of(self, entity_key: str) -> tuple[str, ...]:
        """The document states (with a lifecycle) followed by the state machine's states."""
        entity = self.entities.get(entity_key)
        if entity is None:
            return ()
        lifecycle = tuple(s.value for s in DocStatus) if entity.spec.lifecycle else ()
        machine = entity.spec.state_machine
        return lifecycle + (machine.states if machine is not None else ())

    def summary(self) -> str:
        fields = sum(len(e.spec.fields) for e in self.entities.values())
        return (
            f"{len(self.modules)} modules, {len(self.entities)} entities, {fields} fields, "
            f"{len(self.apps)} apps, {len(self.manifests)} manifests"
        )


def qualify(ref: str, module: str | None) -> str:
    """Normalise a reference to ``module/name``."""
    if "/" in ref:
        return ref
    if "." in ref:
        return ref.replace(".", "/", 1)
    return f"{module}/{ref}" if module else ref


_ATTRIBUTES: dict[str, type[m.Manifest]] = {
    "modules": m.ModuleManifest,
    "entities": m.EntityManifest,
    "services": m.ServiceManifest,
    "apps": m.AppManifest,
    "pages": m.PageManifest,
    "forms": m.FormManifest,
    "tables": m.TableManifest,
    "kanbans": m.KanbanManifest,
    "listings": m.ListingManifest,
    "approval_inboxes": m.ApprovalInboxManifest,
    "dashboards": m.DashboardManifest,
    "workspaces": m.WorkspaceManifest,
    "environments": m.EnvironmentManifest,
    "datastores": m.DatastoreManifest,
    "configs": m.ConfigManifest,
    "roles": m.RoleManifest,
}
