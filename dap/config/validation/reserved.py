"""Reserved actions: what an entity may change of a standard action it re-declares by name.

The engine implements ``list``, ``find``, ``create``, ``update``, ``delete``, ``submit`` and
``cancel`` itself (``StandardAction``): their input is the record, their answer the record, their
event the built-in one, their transaction the engine's. A re-declaration may tune who calls them
and how they are shown, never what they do, so only :data:`ALLOWED` keys may be set:

- ``name`` (how the action is named), ``description``;
- ``required_permission`` (who), ``disabled`` (removed from every surface);
- ``audit`` (recorded in the audit trail), ``conditions`` (checked before the write);
- ``ui`` (the button).

Anything else -- ``call``, ``track``, ``callback``, ``emits``, ``params``, ``impl``, ``uses``,
``idempotent``, ``idempotency_key``, ``rate_limit``, ``expose``, ``public``, ``challenge`` -- would
either be ignored silently or change the action's contract, so it is refused with
``SVC.VALIDATE.RESERVED_ACTION_MODIFIED`` naming file, path and what may be changed. A key set to
its default value changes nothing and passes. Which protocols serve a standard action is the
entity's ``expose[].actions``; a different behaviour is a custom action under another name.
"""

from __future__ import annotations

from collections.abc import Iterator

from dap.config.actions import Action
from dap.config.enums import StandardAction
from dap.config.errors import Problem
from dap.config.specs import Spec
from dap.config.validation import locating

CODE = "SVC.VALIDATE.RESERVED_ACTION_MODIFIED"
RESERVED = frozenset(str(a) for a in StandardAction)
ALLOWED = ("name", "description", "required_permission", "disabled", "audit", "conditions", "ui")


def modified(action: Action) -> list[str]:
    """The keys ``action`` sets beyond :data:`ALLOWED` to something other than their default. Pure."""
    fields = type(action).model_fields
    return sorted(
        key
        for key in action.model_fields_set
        if key not in ALLOWED and getattr(action, key) != fields[key].get_default(call_default_factory=True)
    )


def reserved_action_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        for i, action in enumerate(entity.spec.actions):
            if action.name not in RESERVED:
                continue
            for key in modified(action):
                yield locating.at(
                    spec,
                    entity,
                    f"spec.actions[{i}].{key}",
                    f"{CODE}: {action.name!r} is a standard action the engine implements; a re-declaration "
                    f"may set only {', '.join(ALLOWED)}: remove {key!r}"
                    + (
                        " (which protocols serve it is the entity's expose[].actions)"
                        if key == "expose"
                        else ", or declare a custom action under another name"
                    ),
                )
