"""Rules on names: modules exist, slugs and identifiers are well formed, roles and permissions."""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import roles
from dap.config.errors import Problem
from dap.config.names import RESERVED_SLUGS
from dap.config.specs import Spec
from dap.config.validation import locating


def modules_exist(spec: Spec) -> Iterator[Problem]:
    for man in spec.manifests:
        module = man.metadata.module
        if module is not None and module not in spec.modules:
            yield from locating.undeclared(
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
                yield locating.at(
                    spec, man, "metadata.name", f"{name!r} is a reserved URL segment; choose another slug"
                )
            elif "_" in name or name.endswith("-"):
                yield locating.at(
                    spec,
                    man,
                    "metadata.name",
                    f"workspace slug {name!r} must be kebab-case (e.g. acme-buying)",
                )
        elif "-" in name:
            yield locating.at(
                spec, man, "metadata.name", f"{name!r} must be lower snake_case (use _ instead of -)"
            )


def role_rules(spec: Spec) -> Iterator[Problem]:
    for role in spec.roles.values():
        name = role.metadata.name
        if name == roles.ADMIN_ROLE:
            yield locating.at(
                spec,
                role,
                "metadata.name",
                "'admin' is built in and holds every permission; give this role another name",
            )
        for i, included in enumerate(role.spec.includes):
            if included not in spec.roles:
                yield from locating.undeclared(
                    spec, role, f"spec.includes[{i}]", "Role", included, f"role {included!r} is not declared"
                )
        cycle = _include_cycle(spec, name)
        if cycle:
            yield locating.at(
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
                yield locating.at(
                    spec,
                    entity,
                    path,
                    f"{permission!r} is not a permission name; write dotted lower snake_case segments "
                    "such as buying.purchase_order.approve (no *)",
                )
