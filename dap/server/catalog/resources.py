"""The loaded spec as the server sees it: one immutable object derived once per spec.

A :class:`Catalog` holds the entities, their tables, which REST actions each opts into, and the
UI kinds (apps, pages, forms, tables) that the UI metadata endpoints answer from. The app keeps
it behind ``state.SpecHolder``: a request reads the reference once and uses that catalog to the
end, so a swap by the resource pod never mixes two specs inside one request.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dap.config import Spec
from dap.config import offers as config_offers
from dap.config.apps import ApprovalInboxSpec, AppSpec, FormSpec, PageSpec, TableSpec
from dap.config.base import Record
from dap.config.entities import EntitySpec, ExposeConfig
from dap.config.enums import REST_ACTIONS, FieldType, ProtocolType
from dap.config.fields import Field
from dap.config.platform import ApiGRPCConfig, DatastoreSpec, ServiceSpec, WorkspaceSpec
from dap.config.roles import RoleSpec
from dap.server import fieldvalues
from dap.server.catalog import machines, plans
from dap.server.catalog.grants import Grants
from dap.server.storage import caching, indexing, tables
from dap.server.storage.tables import Table

REST_SURFACE = "rest"


@dataclass(frozen=True)
class Slot:
    """How one output field of a record is read from a row and turned into JSON."""

    name: str
    column: str | None  # None: a child field stored in its own table
    convert: Callable[[Any], Any] | None
    exclude: frozenset[str]


Presented = tuple[str, str | None, Callable[[Any], Any] | None]  # a slot's name, column, convert


@dataclass(frozen=True)
class Referrer:
    """A column that holds ids of another entity's records, and what deleting one of those does."""

    table: str  # the referring table (an entity's or a child table)
    column: str
    entity: str  # the referring entity, module/name
    field: str
    on_delete: str  # restrict, cascade, set_null
    kind: str  # "entity" or "child"
    owner: str = ""  # the referring entity's main table (its cached answers include child rows)
    children: tuple[str, ...] = ()  # child tables of a referring entity row (for cascade)


@dataclass(frozen=True)
class RelationSlot:
    """Where a write may carry ids of another entity's records, checked before it is stored."""

    kind: str  # "record" (a field of the record), "child" (a field of each child row), "ext"
    container: str  # the child field or extension namespace holding ``field`` ("" for the record)
    field: str
    target: str  # the target entity's main table
    multiple: bool = False


@dataclass(frozen=True)
class Resource:
    """One entity reachable over REST: its declaration, table, child tables and opted-in actions."""

    key: str  # module/name
    module: str
    name: str
    spec: EntitySpec
    table: Table
    children: Mapping[str, Table]  # child field name -> child table
    actions: frozenset[str]
    title: str
    fields: Mapping[str, Field] = field(default_factory=dict)  # REST-visible, stored or child
    slots: tuple[Slot, ...] = ()  # the output plan, in field order
    relations: Mapping[str, str] = field(default_factory=dict)  # relation field -> target table
    relation_slots: tuple[RelationSlot, ...] = ()  # every relation a write carries, children included
    extensions: Mapping[str, tuple[Field, ...]] = field(default_factory=dict)  # namespace -> fields
    cache_ttl: float | None = None  # seconds of the find-by-id read-through cache, if declared
    derivation: plans.Plan = plans.NOTHING  # computed, auto_fill, *_when, rules, keys, guards
    grants: Grants = field(default_factory=Grants)  # the catalog's, for guards
    workflow: Mapping[str, machines.ActionPlan] = field(default_factory=dict)  # custom actions, moves
    # surface -> (name, column, convert) of the slots it shows; filled on first use by
    # documents.reading, so a row is answered without testing every slot against the surface
    presenting: dict[str, tuple[Presented, ...]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    # what the write path derives from the declaration, on first use, under a key of the module
    # that derives it (documents.writing: the child fields, the column of each field name;
    # documents.auditing: whether an action writes audit rows), so a write pays a lookup
    derived: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    @property
    def lifecycle(self) -> bool:
        return self.spec.lifecycle

    def column(self, field_name: str) -> str | None:
        col = self.table.column_for(field_name)
        return col.name if col is not None else None


def _disabled(spec: EntitySpec, action: str) -> bool:
    """A standard action re-declared with ``disabled: true`` is removed from every surface."""
    declared = spec.action(action)
    return declared is not None and declared.disabled


def _exposed(spec: EntitySpec, protocol: ProtocolType) -> ExposeConfig | None:
    """The entity's enabled ``expose`` entry for ``protocol``, if it opted in."""
    return next((e for e in spec.expose if e.type is protocol and e.enabled), None)


def _verbs(spec: EntitySpec, entry: ExposeConfig | None) -> frozenset[str]:
    """The standard verbs an ``expose`` entry opens (none without one), less the disabled ones."""
    if entry is None:
        return frozenset()
    return frozenset(str(a) for a in REST_ACTIONS if entry.allows(a) and not _disabled(spec, a))


def _services(
    services: Mapping[str, ServiceSpec] | None, protocol: str
) -> Mapping[str, machines.ServicePlan]:
    """The services an enabled ``expose`` entry of ``protocol`` opens, compiled."""
    return MappingProxyType(
        {
            k: p
            for k, s in (services or {}).items()
            if (p := machines.compile_service(k, s, protocol)) is not None
        }
    )


def _main_table(by_entity: Mapping[str, list[Table]], key: str) -> Table | None:
    return next((t for t in by_entity.get(key, ()) if t.kind == "entity"), None)


def _rest_fields(spec: EntitySpec) -> dict[str, Field]:
    return {
        f.name: f
        for f in spec.fields
        if not f.removed and REST_SURFACE not in f.exclude and f.name not in tables.SYSTEM_FIELDS
    }


def _masker(fields: tuple[Field, ...]) -> Callable[[Any], Any] | None:
    """Masks the masked fields inside an extension namespace's object."""
    masked = frozenset(f.name for f in fields if f.masked)
    if not masked:
        return None
    return lambda data: {
        k: (fieldvalues.MASK if k in masked and v is not None else v) for k, v in data.items()
    }


def _relations(
    fields: Mapping[str, Field], module: str, by_entity: Mapping[str, list[Table]]
) -> dict[str, str]:
    """Single-valued relation fields whose target has a table, with that table's name."""
    out: dict[str, str] = {}
    for name, f in fields.items():
        if f.type is not FieldType.RELATION or f.relation is None or f.multiple:
            continue
        owned = by_entity.get(tables.resolve_ref(f.relation.entity, module), [])
        main = next((t for t in owned if t.kind == "entity"), None)
        if main is not None:
            out[name] = main.name
    return out


def _relation_slots(
    visible: Mapping[str, Field],
    extensions: Mapping[str, tuple[Field, ...]],
    module: str,
    entities: Mapping[str, EntitySpec],
    by_entity: Mapping[str, list[Table]],
) -> tuple[RelationSlot, ...]:
    """Every relation field of the record, of its child rows and of its extensions, with its target."""

    def target(f: Field) -> str | None:
        if f.type is not FieldType.RELATION or f.relation is None:
            return None
        main = _main_table(by_entity, tables.resolve_ref(f.relation.entity, module))
        return main.name if main is not None else None

    out: list[RelationSlot] = []
    for name, f in visible.items():
        if (t := target(f)) is not None:
            out.append(RelationSlot("record", "", name, t, bool(f.multiple)))
        if f.type is FieldType.CHILD and f.child is not None:
            for row_field in tables.child_fields(f, module, entities):
                if (t := target(row_field)) is not None:
                    out.append(RelationSlot("child", name, row_field.name, t, bool(row_field.multiple)))
    for ns, ext_fields in extensions.items():
        for ext_field in ext_fields:
            if (t := target(ext_field)) is not None:
                out.append(RelationSlot("ext", ns, ext_field.name, t, bool(ext_field.multiple)))
    return tuple(out)


def _referrers(
    entities: Mapping[str, EntitySpec], by_entity: Mapping[str, list[Table]]
) -> dict[str, tuple[Referrer, ...]]:
    """Every single-valued relation column of every table, grouped by the table it points at."""
    out: dict[str, list[Referrer]] = {}
    for key, owned in by_entity.items():
        module = key.split("/", 1)[0]
        spec = entities[key]
        children = tuple(t.name for t in owned if t.kind == "child")
        for t in owned:
            if t.kind == "entity":
                decls = {f.name: f for f in spec.fields}
            else:
                parent = spec.field(t.field or "")
                decls = {f.name: f for f in tables.child_fields(parent, module, entities)} if parent else {}
            for column in t.columns:
                f = decls.get(column.field or "")
                if f is None or f.type is not FieldType.RELATION or f.relation is None or f.multiple:
                    continue
                target = next(
                    (
                        x
                        for x in by_entity.get(tables.resolve_ref(f.relation.entity, module), [])
                        if x.kind == "entity"
                    ),
                    None,
                )
                if target is not None:
                    out.setdefault(target.name, []).append(
                        Referrer(
                            t.name,
                            column.name,
                            key,
                            f.name,
                            f.relation.on_delete,
                            t.kind,
                            owner=next(x.name for x in owned if x.kind == "entity"),
                            children=children if t.kind == "entity" else (),
                        )
                    )
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class Catalog:
    entities: Mapping[str, EntitySpec]
    tables: tuple[Table, ...]
    resources: Mapping[str, Resource]  # only entities exposed over REST
    # entities exposed over gRPC (``expose`` has ``grpc``), each with the verbs that entry opens
    grpc: Mapping[str, Resource] = field(default_factory=dict)
    # entities whose ``expose`` has ``ws``: the request/response calls of the ``/{ws}/_ws`` socket
    ws: Mapping[str, Resource] = field(default_factory=dict)
    module_grpc: Mapping[str, ApiGRPCConfig] = field(default_factory=dict)  # Module ``api.grpc``, by name
    titles: Mapping[str, str] = field(default_factory=dict)
    apps: Mapping[str, AppSpec] = field(default_factory=dict)
    pages: Mapping[str, PageSpec] = field(default_factory=dict)
    forms: Mapping[str, FormSpec] = field(default_factory=dict)
    views: Mapping[str, TableSpec] = field(default_factory=dict)  # Table manifests
    # Kanban, Listing, ApprovalInbox and Dashboard manifests and the Workspace manifests, for the UI
    ui_parts: Mapping[str, Record] = field(default_factory=dict)
    workspaces: Mapping[str, WorkspaceSpec] = field(default_factory=dict)
    referrers: Mapping[str, tuple[Referrer, ...]] = field(default_factory=dict)  # by target table
    grants: Grants = field(default_factory=Grants)  # resolved Role manifests
    inboxes: Mapping[str, ApprovalInboxSpec] = field(default_factory=dict)  # ApprovalInbox manifests
    services: Mapping[str, machines.ServicePlan] = field(default_factory=dict)  # exposed over REST
    # services whose ``expose`` has ``grpc`` / ``ws`` (a service's actions over those protocols)
    grpc_services: Mapping[str, machines.ServicePlan] = field(default_factory=dict)
    ws_services: Mapping[str, machines.ServicePlan] = field(default_factory=dict)
    datastores: Mapping[str, DatastoreSpec] = field(default_factory=dict)  # Datastore manifests (the bridge)
    # services an app offers in its ``interfaces``, by service key, with the owning app (issue 47)
    offers: Mapping[str, config_offers.Offer] = field(default_factory=dict)
    # the tables' indexes with the declared lists each serves (``storage.indexing``, issue 48)
    indexes: indexing.Derivation = field(default_factory=lambda: indexing.Derivation((), ()))

    def resource(self, module: str, name: str) -> Resource | None:
        return self.resources.get(f"{module}/{name}")

    def any_resource(self, key: str) -> Resource | None:
        """The entity ``key`` as exposed on any protocol (a job runs whichever protocol queued it;
        the resources differ only in the verbs each opens)."""
        return self.resources.get(key) or self.grpc.get(key) or self.ws.get(key)

    def any_service(self, key: str) -> machines.ServicePlan | None:
        """The service ``key`` as exposed on any protocol (its plan is the same on each)."""
        return self.services.get(key) or self.grpc_services.get(key) or self.ws_services.get(key)

    @classmethod
    def build(
        cls,
        entities: Mapping[str, EntitySpec],
        *,
        titles: Mapping[str, str] | None = None,
        apps: Mapping[str, AppSpec] | None = None,
        pages: Mapping[str, PageSpec] | None = None,
        forms: Mapping[str, FormSpec] | None = None,
        views: Mapping[str, TableSpec] | None = None,
        roles: Mapping[str, RoleSpec] | None = None,
        inboxes: Mapping[str, ApprovalInboxSpec] | None = None,
        services: Mapping[str, ServiceSpec] | None = None,
        ui_parts: Mapping[str, Record] | None = None,
        workspaces: Mapping[str, WorkspaceSpec] | None = None,
        datastores: Mapping[str, DatastoreSpec] | None = None,
        module_grpc: Mapping[str, ApiGRPCConfig] | None = None,
    ) -> Catalog:
        """Derive tables and REST resources from entity specs keyed ``module/name``.

        An entity with a state machine gets its ``state`` field here (``machines.with_state``), so
        every consumer of the catalog (tables, migrations, records, OpenAPI, UI) sees it alike.
        """
        entities = {key: machines.with_state(spec) for key, spec in entities.items()}
        declared = [*(views or {}).items(), *(ui_parts or {}).items()]
        derivation = indexing.derive(
            tables.all_tables(entities), entities, indexing.declared_lists(entities, declared)
        )
        all_tables = indexing.apply(tables.all_tables(entities), derivation)
        by_entity: dict[str, list[Table]] = {}
        for t in all_tables:
            by_entity.setdefault(t.entity, []).append(t)
        resources: dict[str, Resource] = {}
        names = dict(titles or {})
        extending: dict[str, dict[str, tuple[Field, ...]]] = {}
        for key, spec in entities.items():
            if spec.extends is not None:
                target = tables.resolve_ref(spec.extends.target, key.split("/", 1)[0])
                extending.setdefault(target, {})[spec.extends.namespace] = spec.stored_fields
        grants = Grants.of(roles or {})
        grpc: dict[str, Resource] = {}
        sockets: dict[str, Resource] = {}
        for key, spec in entities.items():
            rest = spec.rest()
            rpc = _exposed(spec, ProtocolType.GRPC)
            socket = _exposed(spec, ProtocolType.WS)
            module, name = key.split("/", 1)
            title = spec.title or names.get(key) or name.replace("_", " ").capitalize()
            names[key] = title
            if (
                (rest is None and rpc is None and socket is None)
                or spec.extends is not None
                or key not in by_entity
            ):
                continue
            owned = by_entity[key]
            main = next(t for t in owned if t.kind == "entity")
            children = {t.field or "": t for t in owned if t.kind == "child"}
            visible = _rest_fields(spec)
            slots = tuple(
                Slot(
                    name,
                    None if name in children else (c.name if (c := main.column_for(name)) else None),
                    fieldvalues.converter(f),
                    frozenset(f.exclude),
                )
                for name, f in visible.items()
                if name in children or main.column_for(name) is not None
            )
            ext_columns = {
                ns: col.name
                for ns in sorted(extending.get(key, {}))
                if ns not in visible and (col := main.column_for(f"ext_{ns}")) is not None
            }
            extensions = {ns: extending[key][ns] for ns in ext_columns}
            slots += tuple(
                Slot(ns, column, _masker(extensions[ns]), frozenset()) for ns, column in ext_columns.items()
            )
            resource = Resource(
                key=key,
                module=module,
                name=name,
                spec=spec,
                table=main,
                children=MappingProxyType(children),
                actions=_verbs(spec, rest),
                title=title,
                fields=MappingProxyType(visible),
                slots=slots,
                relations=MappingProxyType(_relations(visible, module, by_entity)),
                relation_slots=_relation_slots(visible, extensions, module, entities, by_entity),
                extensions=MappingProxyType(extensions),
                cache_ttl=caching.ttl_seconds(spec.cache.ttl if spec.cache else None),
                derivation=plans.plan_for(spec, module, entities, functools.partial(_main_table, by_entity)),
                grants=grants,
                workflow=machines.compile_actions(spec),
            )
            if rest is not None:
                resources[key] = resource
            if rpc is not None:  # the same resource, opened to the verbs of its grpc entry
                grpc[key] = dataclasses.replace(resource, actions=_verbs(spec, rpc))
            if socket is not None:
                sockets[key] = dataclasses.replace(resource, actions=_verbs(spec, socket))
        return cls(
            entities=MappingProxyType(dict(entities)),
            tables=all_tables,
            resources=MappingProxyType(resources),
            grpc=MappingProxyType(grpc),
            ws=MappingProxyType(sockets),
            module_grpc=MappingProxyType(dict(module_grpc or {})),
            titles=MappingProxyType(names),
            apps=MappingProxyType(dict(apps or {})),
            pages=MappingProxyType(dict(pages or {})),
            forms=MappingProxyType(dict(forms or {})),
            views=MappingProxyType(dict(views or {})),
            ui_parts=MappingProxyType(dict(ui_parts or {})),
            workspaces=MappingProxyType(dict(workspaces or {})),
            datastores=MappingProxyType(dict(datastores or {})),
            indexes=derivation,
            referrers=MappingProxyType(_referrers(entities, by_entity)),
            grants=grants,
            inboxes=MappingProxyType(dict(inboxes or {})),
            services=_services(services, "rest"),
            grpc_services=_services(services, "grpc"),
            ws_services=_services(services, "ws"),
            offers=MappingProxyType(
                config_offers.offers(
                    apps or {}, {k: [a.name for a in s.actions] for k, s in (services or {}).items()}
                )
            ),
        )

    @classmethod
    def from_spec(cls, spec: Spec) -> Catalog:
        """From a ``dap.config`` loaded spec (``spec.entities`` etc. keyed ``module/name``)."""
        return cls.build(
            {key: m.spec for key, m in spec.entities.items()},
            apps={k: m.spec for k, m in spec.apps.items()},
            pages={k: m.spec for k, m in spec.pages.items()},
            forms={k: m.spec for k, m in spec.forms.items()},
            views={k: m.spec for k, m in spec.tables.items()},
            roles={k: m.spec for k, m in spec.roles.items()},
            inboxes={k: m.spec for k, m in spec.approval_inboxes.items()},
            services={k: m.spec for k, m in spec.services.items()},
            ui_parts={
                k: m.spec
                for kind in (spec.kanbans, spec.listings, spec.approval_inboxes, spec.dashboards)
                for k, m in kind.items()
            },
            workspaces={k: m.spec for k, m in spec.workspaces.items()},
            datastores={k: m.spec for k, m in spec.datastores.items()},
            module_grpc={
                m.metadata.name: m.spec.api.grpc
                for m in spec.modules.values()
                if m.spec.api is not None and m.spec.api.grpc is not None
            },
        )
