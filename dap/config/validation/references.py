"""Rules on references between documents: UI views to entities and fields, apps to pages, modules to
modules, workspaces to apps and environments.
"""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import manifests as m
from dap.config.errors import Problem
from dap.config.specs import Spec, qualify
from dap.config.validation import locating


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
            yield from locating.undeclared_entity(
                spec, owner, "spec.entity", ref, f"{ref!r} is not a declared entity"
            )
            continue
        # a state machine gives its records a ``state`` field (dap.server.catalog.machines)
        machine_state = {"state"} if target.spec.state_machine is not None else set()
        for path, name in fields:
            if (
                name not in locating.FILTERABLE_SYSTEM_FIELDS | machine_state
                and target.spec.field(name) is None
            ):
                yield locating.at(spec, owner, path, f"{target.key} has no field {name!r}")
    for form in spec.forms.values():
        target = spec.resolve_entity(form.spec.entity, form.metadata.module)
        if target is not None:
            actions = locating.entity_actions(target.spec)
            for i, action in enumerate(form.spec.actions):
                if action.action not in actions:
                    yield locating.at(
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
                yield from locating.undeclared(
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
                yield from locating.undeclared(
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
                yield from locating.undeclared(
                    spec,
                    workspace,
                    f"spec.apps[{i}]",
                    "App",
                    qualify(ref, None),
                    f"app {ref!r} is not declared (write module/name)",
                )
        env = workspace.spec.environment
        if env is not None and spec.environments and env not in spec.environments:
            yield from locating.undeclared(
                spec,
                workspace,
                "spec.environment",
                "Environment",
                env,
                f"environment {env!r} is not declared",
            )
