"""Rules that need more than one record: names, cross-references, and the spec's refusals.

Each rule is a generator over the whole ``Spec`` yielding ``Problem``s; ``check`` runs them all,
so one run reports every problem. Rules on a single field's own keys that the JSON Schema cannot
say (``currency`` only on money, ``multiple`` with options) live here too, next to their siblings,
so that all of a field's rules read in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta

from dap.config import durations, expressions, roles
from dap.config import manifests as m
from dap.config.entities import EntitySpec, FilterSpec
from dap.config.enums import (
    REST_ACTIONS,
    ApprovalStepMode,
    EventChannel,
    FieldType,
    FilterFrom,
    FilterOp,
    StandardAction,
)
from dap.config.errors import Problem
from dap.config.events import DeliveryTarget
from dap.config.fields import Field
from dap.config.names import RESERVED_SLUGS
from dap.config.specs import Spec, qualify

Rule = Callable[[Spec], Iterator[Problem]]
SYSTEM_FIELDS = frozenset(
    {"id", "tenant_id", "version", "docstatus", "created_at", "updated_at", "created_by", "owner"}
)
FILTERABLE_SYSTEM_FIELDS = frozenset({"id", "docstatus", "created_at", "updated_at", "owner"})
CACHE_TTL_MIN = timedelta(seconds=1)
CACHE_TTL_MAX = timedelta(hours=1)


def check(spec: Spec) -> list[Problem]:
    """Every problem the cross-document rules find in ``spec``."""
    return [problem for rule in RULES for problem in rule(spec)]


def _at(spec: Spec, manifest: m.Manifest, path: str, message: str) -> Problem:
    origin = spec.origin(manifest)
    return Problem(origin.file, origin.document, path, message)


def _undeclared(
    spec: Spec, owner: m.Manifest, path: str, kind: str, key: str, message: str
) -> Iterator[Problem]:
    """``message`` about a reference to an undeclared ``kind`` ``key``, unless a document that
    failed to build may declare it (then the reference is no mistake of its own)."""
    if not spec.unbuilt.may_declare(kind, key):
        yield _at(spec, owner, path, message)


def _undeclared_entity(spec: Spec, owner: m.Manifest, path: str, ref: str, message: str) -> Iterator[Problem]:
    return _undeclared(spec, owner, path, "Entity", qualify(ref, owner.metadata.module), message)


def _duplicates(names: Iterable[str]) -> list[str]:
    return [name for name, count in Counter(names).items() if count > 1]


def _entity_actions(entity: EntitySpec) -> set[str]:
    standard = set(REST_ACTIONS)
    if entity.lifecycle:
        standard |= {StandardAction.SUBMIT, StandardAction.CANCEL}
    return {a.name for a in entity.actions} | {str(a) for a in standard}


# --- names -------------------------------------------------------------------------------------


def modules_exist(spec: Spec) -> Iterator[Problem]:
    for man in spec.manifests:
        module = man.metadata.module
        if module is not None and module not in spec.modules:
            yield from _undeclared(
                spec,
                man,
                "metadata.module",
                "Module",
                module,
                f"module {module!r} is not declared; add a Module manifest",
            )


def names_are_identifiers(spec: Spec) -> Iterator[Problem]:
    for man in spec.manifests:
        name = man.metadata.name
        if man.kind == "Workspace":
            if name in RESERVED_SLUGS:
                yield _at(
                    spec, man, "metadata.name", f"{name!r} is a reserved URL segment; choose another slug"
                )
            elif "_" in name or name.endswith("-"):
                yield _at(
                    spec,
                    man,
                    "metadata.name",
                    f"workspace slug {name!r} must be kebab-case (e.g. acme-buying)",
                )
        elif "-" in name:
            yield _at(spec, man, "metadata.name", f"{name!r} must be lower snake_case (use _ instead of -)")


# --- entities and fields -----------------------------------------------------------------------


def _field_lists(entity: EntitySpec) -> Iterator[tuple[str, tuple[Field, ...]]]:
    """Every list of sibling fields in an entity, with its JSON path: the entity's, child rows', params'."""
    yield "spec.fields", entity.fields
    for i, field in enumerate(entity.fields):
        if field.child is not None and field.child.fields:
            yield f"spec.fields[{i}].child.fields", field.child.fields
    for i, action in enumerate(entity.actions):
        if action.params is not None:
            yield f"spec.actions[{i}].params.fields", action.params.fields


def field_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        for base, siblings in _field_lists(entity.spec):
            for name in _duplicates(f.name for f in siblings):
                yield _at(spec, entity, base, f"field {name!r} is declared twice; field names are unique")
            for i, field in enumerate(siblings):
                yield from _one_field(
                    spec, entity, f"{base}[{i}]", field, siblings, top=base == "spec.fields"
                )


def _one_field(
    spec: Spec, entity: m.EntityManifest, path: str, field: Field, siblings: tuple[Field, ...], *, top: bool
) -> Iterator[Problem]:
    def problem(sub: str, message: str) -> Problem:
        return _at(spec, entity, f"{path}.{sub}" if sub else path, message)

    module = entity.metadata.module
    if top and field.name in SYSTEM_FIELDS:
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
            yield from _undeclared_entity(
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
        yield _at(
            spec, entity, f"{path}.child", "a child field needs child.storage (jsonb or table) and fields"
        )
        return
    if child.entity is not None and spec.resolve_entity(child.entity, entity.metadata.module) is None:
        yield from _undeclared_entity(
            spec,
            entity,
            f"{path}.child.entity",
            child.entity,
            f"child entity {child.entity!r} is not a declared entity",
        )
    if child.entity is None and not child.fields:
        yield _at(spec, entity, f"{path}.child", "a child needs fields (or entity naming the row entity)")
    if (
        child.sequence_field is not None
        and child.fields
        and child.sequence_field not in {f.name for f in child.fields}
    ):
        yield _at(
            spec, entity, f"{path}.child.sequence_field", f"{child.sequence_field!r} is not a child field"
        )
    if child.picker is not None and spec.resolve_entity(child.picker.entity, entity.metadata.module) is None:
        yield from _undeclared_entity(
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
        yield _at(
            spec,
            entity,
            f"{path}.auto_fill.from",
            f"{field.auto_fill.from_!r} must name a relation field of the same row",
        )
        return
    target = spec.resolve_entity(source.relation.entity, entity.metadata.module)
    if target is not None and target.spec.field(field.auto_fill.field) is None:
        yield _at(
            spec,
            entity,
            f"{path}.auto_fill.field",
            f"{target.key} has no field {field.auto_fill.field!r} to copy",
        )


def cache_ttl_in_range(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        cache = entity.spec.cache
        if cache is not None and not CACHE_TTL_MIN <= durations.parse(cache.ttl) <= CACHE_TTL_MAX:
            yield _at(spec, entity, "spec.cache.ttl", f"cache ttl {cache.ttl} must be between 1s and 1h")


def extension_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        extends = entity.spec.extends
        if extends is None:
            continue
        if spec.resolve_entity(extends.target, entity.metadata.module) is None:
            yield from _undeclared_entity(
                spec,
                entity,
                "spec.extends.target",
                extends.target,
                f"{extends.target!r} is not a declared entity",
            )
        for i, field in enumerate(entity.spec.fields):
            if field.required:
                yield _at(
                    spec,
                    entity,
                    f"spec.fields[{i}].required",
                    "extension fields must not be required (the base entity's writers do not know them); "
                    "remove required: true or validate in extends.validate",
                )


# --- actions, events, state machine --------------------------------------------------------------


def action_and_event_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        es = entity.spec
        for name in _duplicates(a.name for a in es.actions):
            yield _at(spec, entity, "spec.actions", f"action {name!r} is declared twice")
        for name in _duplicates(e.name for e in es.events):
            yield _at(spec, entity, "spec.events", f"event {name!r} is declared twice")
        for i, action in enumerate(es.actions):
            if action.emits is not None and es.event(action.emits) is None:
                yield _at(
                    spec,
                    entity,
                    f"spec.actions[{i}].emits",
                    f"event {action.emits!r} is not declared in spec.events of {entity.key}",
                )
        actions = _entity_actions(es)
        for i, event in enumerate(es.events):
            for j, delivery in enumerate(event.deliver):
                path = f"spec.events[{i}].deliver[{j}]"
                for key in ("handler", "job"):
                    name = getattr(delivery, key)
                    if name is not None and name not in actions:
                        yield _at(
                            spec, entity, f"{path}.{key}", f"action {name!r} is not declared on {entity.key}"
                        )
                if delivery.channel is EventChannel.RELIABLE_EVENT:
                    yield from _reliable_target(spec, entity, path, delivery.target)


def _reliable_target(
    spec: Spec, entity: m.EntityManifest, path: str, target: DeliveryTarget | None
) -> Iterator[Problem]:
    resource = target.resource if target is not None else None
    action = target.action if target is not None else None
    if resource is None or action is None:
        yield _at(
            spec, entity, f"{path}.target", "reliable_event needs target.resource (module.entity) and action"
        )
        return
    receiver = spec.resolve_entity(resource, entity.metadata.module)
    if receiver is None:
        yield from _undeclared_entity(
            spec, entity, f"{path}.target.resource", resource, f"{resource!r} is not a declared entity"
        )
    elif action not in _entity_actions(receiver.spec):
        yield _at(spec, entity, f"{path}.target.action", f"{receiver.key} has no action {action!r}")


def state_machine_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        machine = entity.spec.state_machine
        if machine is None:
            continue
        states = set(machine.states)
        for name in _duplicates(machine.states):
            yield _at(spec, entity, "spec.state_machine.states", f"state {name!r} is listed twice")
        if machine.initial is not None and machine.initial not in states:
            yield _at(
                spec, entity, "spec.state_machine.initial", f"{machine.initial!r} is not a declared state"
            )
        actions = _entity_actions(entity.spec)
        for i, transition in enumerate(machine.transitions):
            path = f"spec.state_machine.transitions[{i}]"
            for origin in transition.origins:
                if origin not in states:
                    yield _at(spec, entity, f"{path}.from", f"{origin!r} is not a declared state")
            if transition.to not in states:
                yield _at(spec, entity, f"{path}.to", f"{transition.to!r} is not a declared state")
            if transition.action is not None and transition.action not in actions:
                yield _at(spec, entity, f"{path}.action", f"action {transition.action!r} is not declared")
            approval = transition.approval
            if approval is None:
                continue
            if approval.on_reject is not None and approval.on_reject.to not in states:
                yield _at(
                    spec,
                    entity,
                    f"{path}.approval.on_reject.to",
                    f"{approval.on_reject.to!r} is not a declared state",
                )
            for j, step in enumerate(approval.steps):
                if step.mode is ApprovalStepMode.ALL:
                    yield _at(
                        spec,
                        entity,
                        f"{path}.approval.steps[{j}].mode",
                        "mode 'all' is not supported; use mode: any with approvers: N, or mode: sequential",
                    )
            for name in _duplicates(s.name for s in approval.steps):
                yield _at(spec, entity, f"{path}.approval.steps", f"approval step {name!r} is declared twice")


# --- row scope -----------------------------------------------------------------------------------


def _filters_exist(
    spec: Spec, owner: m.Manifest, target: EntitySpec, path: str, filters: tuple[FilterSpec, ...]
) -> Iterator[Problem]:
    for i, flt in enumerate(filters):
        if flt.field not in FILTERABLE_SYSTEM_FIELDS and target.field(flt.field) is None:
            yield _at(spec, owner, f"{path}[{i}].field", f"{flt.field!r} is not a field of the entity")


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
            yield _at(
                spec, entity, f"{path}.field", f"{name!r} holds JSON or a list and cannot carry row scope"
            )
        if op is not None and op not in SESSION_OPS:
            yield _at(
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
                yield _at(
                    spec, entity, f"spec.assignments[{i}].field", f"{assignment.field!r} is not a field"
                )
            elif assigned.read_only or assigned.computed is not None or "rest" in assigned.exclude:
                yield _at(
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
                    yield _at(
                        spec, entity, f"spec.create_scope.{key}", f"{getattr(scope, key)!r} is not a field"
                    )
            via = spec.resolve_entity(scope.via, entity.metadata.module)
            if via is None:
                yield from _undeclared_entity(
                    spec,
                    entity,
                    "spec.create_scope.via",
                    scope.via,
                    f"{scope.via!r} is not a declared entity",
                )
            elif via.spec.field(scope.via_field) is None:
                yield _at(
                    spec, entity, "spec.create_scope.via_field", f"{via.key} has no field {scope.via_field!r}"
                )
            ref = es.field(scope.ref_field)
            if ref is not None and (ref.type is not FieldType.RELATION or ref.multiple):
                yield _at(
                    spec,
                    entity,
                    "spec.create_scope.ref_field",
                    f"{scope.ref_field!r} must be a single relation field (to {scope.via}) naming the record "
                    "whose via_field the create must match",
                )
        backdate = es.backdate
        if backdate is not None and es.transaction_date_field() is None:
            if backdate.date_field is not None:
                yield _at(
                    spec,
                    entity,
                    "spec.backdate.date_field",
                    f"{backdate.date_field!r} must name a date field",
                )
            else:
                yield _at(
                    spec,
                    entity,
                    "spec.backdate",
                    "a backdate policy needs the transaction date: set date_field, or declare a date field "
                    "named posting_date, transaction_date or date",
                )


# --- roles and permissions ----------------------------------------------------------------------


def role_rules(spec: Spec) -> Iterator[Problem]:
    for role in spec.roles.values():
        name = role.metadata.name
        if name == roles.ADMIN_ROLE:
            yield _at(
                spec,
                role,
                "metadata.name",
                "'admin' is built in and holds every permission; give this role another name",
            )
        for i, included in enumerate(role.spec.includes):
            if included not in spec.roles:
                yield from _undeclared(
                    spec, role, f"spec.includes[{i}]", "Role", included, f"role {included!r} is not declared"
                )
        cycle = _include_cycle(spec, name)
        if cycle:
            yield _at(
                spec,
                role,
                "spec.includes",
                f"roles include each other in a cycle: {' -> '.join(cycle)}; remove one include",
            )


def _include_cycle(spec: Spec, start: str) -> list[str]:
    """The include path from ``start`` back to itself, or an empty list."""
    path: list[str] = []
    seen: set[str] = set()

    def walk(name: str) -> bool:
        path.append(name)
        role = spec.roles.get(name)
        for included in role.spec.includes if role is not None else ():
            if included == start:
                path.append(included)
                return True
            if included not in seen:
                seen.add(included)
                if walk(included):
                    return True
        path.pop()
        return False

    return path if walk(start) else []


def permission_names(spec: Spec) -> Iterator[Problem]:
    """Every permission an entity asks for is a name (a glob belongs in a Role, not in a requirement)."""
    for entity in spec.entities.values():
        es = entity.spec
        asked = [
            (f"spec.fields[{i}].required_permission", f.required_permission) for i, f in enumerate(es.fields)
        ]
        asked += [
            (f"spec.actions[{i}].required_permission", a.required_permission)
            for i, a in enumerate(es.actions)
        ]
        if es.backdate is not None:
            asked.append(("spec.backdate.override_permission", es.backdate.override_permission))
        for path, permission in asked:
            if permission is not None and not roles.is_permission_name(permission):
                yield _at(
                    spec,
                    entity,
                    path,
                    f"{permission!r} is not a permission name; write dotted lower snake_case segments "
                    "such as buying.purchase_order.approve (no *)",
                )


# --- UI kinds, apps, modules, workspaces ---------------------------------------------------------


def ui_reference_rules(spec: Spec) -> Iterator[Problem]:
    views: list[tuple[m.Manifest, str, list[tuple[str, str]]]] = []
    for form in spec.forms.values():
        fields = [(f"spec.fields[{i}].field", f.field) for i, f in enumerate(form.spec.fields)]
        views.append((form, form.spec.entity, fields))
    for table in spec.tables.values():
        columns = [(f"spec.columns[{i}].field", c.field) for i, c in enumerate(table.spec.columns)]
        views.append((table, table.spec.entity, columns))
    for kanban in spec.kanbans.values():
        cards = [(f"spec.card_fields[{i}]", f) for i, f in enumerate(kanban.spec.card_fields)]
        views.append((kanban, kanban.spec.entity, [("spec.group_by", kanban.spec.group_by), *cards]))
    for listing in spec.listings.values():
        views.append(
            (
                listing,
                listing.spec.entity,
                [(f"spec.fields[{i}]", f) for i, f in enumerate(listing.spec.fields)],
            )
        )
    for owner, ref, fields in views:
        target = spec.resolve_entity(ref, owner.metadata.module)
        if target is None:
            yield from _undeclared_entity(
                spec, owner, "spec.entity", ref, f"{ref!r} is not a declared entity"
            )
            continue
        for path, name in fields:
            if name not in FILTERABLE_SYSTEM_FIELDS and target.spec.field(name) is None:
                yield _at(spec, owner, path, f"{target.key} has no field {name!r}")
    for form in spec.forms.values():
        target = spec.resolve_entity(form.spec.entity, form.metadata.module)
        if target is not None:
            actions = _entity_actions(target.spec)
            for i, action in enumerate(form.spec.actions):
                if action.action not in actions:
                    yield _at(
                        spec,
                        form,
                        f"spec.actions[{i}].action",
                        f"{target.key} has no action {action.action!r}",
                    )


def app_rules(spec: Spec) -> Iterator[Problem]:
    for app in spec.apps.values():
        module = app.metadata.module
        refs = [(f"spec.pages[{i}]", p) for i, p in enumerate(app.spec.pages)]
        if app.spec.home is not None:
            refs.append(("spec.home", app.spec.home))
        if app.spec.auth is not None:
            for key in (
                "login_page",
                "change_password_page",
                "reset_password_page",
                "oauth_callback_page",
                "setup_page",
            ):
                value = getattr(app.spec.auth, key)
                if value:
                    refs.append((f"spec.auth.{key}", value))
        for path, ref in refs:
            if spec.resolve(spec.pages, ref, module) is None:
                yield from _undeclared(
                    spec,
                    app,
                    path,
                    "Page",
                    qualify(ref, module),
                    f"page {ref!r} is not declared; add a Page manifest or fix the name",
                )
    for declared in spec.modules.values():
        for i, dependency in enumerate(declared.spec.dependencies):
            if dependency.module not in spec.modules:
                yield from _undeclared(
                    spec,
                    declared,
                    f"spec.dependencies[{i}].module",
                    "Module",
                    dependency.module,
                    f"module {dependency.module!r} is not declared",
                )
    for workspace in spec.workspaces.values():
        for i, ref in enumerate(workspace.spec.apps):
            if spec.apps.get(qualify(ref, None)) is None:
                yield from _undeclared(
                    spec,
                    workspace,
                    f"spec.apps[{i}]",
                    "App",
                    qualify(ref, None),
                    f"app {ref!r} is not declared (write module/name)",
                )
        env = workspace.spec.environment
        if env is not None and spec.environments and env not in spec.environments:
            yield from _undeclared(
                spec,
                workspace,
                "spec.environment",
                "Environment",
                env,
                f"environment {env!r} is not declared",
            )


# --- expressions ---------------------------------------------------------------------------------

# Names every expression may use besides the fields of its row: the identity of the caller, the
# parent document of a child row, and an action's parameters.
CONTEXT_ROOTS = frozenset({"session", "parent", "params"})


def _check_expression(
    spec: Spec, owner: m.Manifest, path: str, source: str | None, names: dict[str, frozenset[str]]
) -> Iterator[Problem]:
    """Parse ``source``; every name it uses must start with a known field (or context root)."""
    if source is None:
        return
    try:
        parsed = expressions.parse(source)
    except expressions.ExpressionError as exc:
        yield _at(spec, owner, path, f"invalid expression {source!r}: {exc}")
        return
    for reference in sorted(parsed.references()):
        head, _, rest = reference.partition(".")
        if head in CONTEXT_ROOTS:
            continue
        if head not in names:
            yield _at(spec, owner, path, f"expression {source!r} uses {head!r}, which is not a field here")
            continue
        sub = rest.partition(".")[0]
        if sub and names[head] and sub not in names[head]:
            yield _at(
                spec, owner, path, f"expression {source!r} uses {reference!r}: {head} rows have no {sub!r}"
            )


def _names(
    fields: tuple[Field, ...], outer: dict[str, frozenset[str]] | None = None
) -> dict[str, frozenset[str]]:
    """Field names usable in an expression, each with the row fields of a child field (else empty)."""
    names = dict(outer or {})
    names.update({name: frozenset() for name in SYSTEM_FIELDS})
    for field in fields:
        rows = field.child.fields if field.child is not None else ()
        names[field.name] = frozenset(f.name for f in rows)
    return names


def expression_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        es = entity.spec
        top = _names(es.fields)
        for base, siblings in _field_lists(es):
            names = top if base == "spec.fields" else _names(siblings, top)
            for i, field in enumerate(siblings):
                path = f"{base}[{i}]"
                for key in ("required_when", "visible_when", "readonly_when"):
                    yield from _check_expression(spec, entity, f"{path}.{key}", getattr(field, key), names)
                formula = field.computed.formula if field.computed is not None else None
                yield from _check_expression(spec, entity, f"{path}.computed.formula", formula, names)
                for j, rule in enumerate(field.rules):
                    if rule.rule == "expression":
                        source = rule.value if isinstance(rule.value, str) else None
                        if source is None:
                            yield _at(
                                spec, entity, f"{path}.rules[{j}].value", "an expression rule needs a value"
                            )
                        yield from _check_expression(spec, entity, f"{path}.rules[{j}].value", source, names)
        for i, action in enumerate(es.actions):
            params = action.params.fields if action.params is not None else ()
            names = _names(params, top)
            for j, condition in enumerate(action.conditions):
                for key in ("script", "expression"):
                    source = getattr(condition, key)
                    path = f"spec.actions[{i}].conditions[{j}].{key}"
                    yield from _check_expression(spec, entity, path, source, names)
            show_when = action.ui.show_when if action.ui is not None else None
            yield from _check_expression(spec, entity, f"spec.actions[{i}].ui.show_when", show_when, names)
        machine = es.state_machine
        for i, transition in enumerate(machine.transitions if machine is not None else ()):
            for j, step in enumerate(transition.approval.steps if transition.approval is not None else ()):
                path = f"spec.state_machine.transitions[{i}].approval.steps[{j}].when"
                yield from _check_expression(spec, entity, path, step.when, top)
    for form in spec.forms.values():
        target = spec.resolve_entity(form.spec.entity, form.metadata.module)
        if target is None:
            continue
        names = _names(target.spec.fields)
        for i, form_field in enumerate(form.spec.fields):
            yield from _check_expression(spec, form, f"spec.fields[{i}].compute", form_field.compute, names)


RULES: tuple[Rule, ...] = (
    modules_exist,
    names_are_identifiers,
    field_rules,
    cache_ttl_in_range,
    extension_rules,
    action_and_event_rules,
    state_machine_rules,
    row_scope_rules,
    role_rules,
    permission_names,
    ui_reference_rules,
    app_rules,
    expression_rules,
)
