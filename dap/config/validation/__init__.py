"""Rules that need more than one record: names, cross-references, and the spec's refusals.

Each rule is a generator over the whole ``Spec`` yielding ``Problem``s; ``check`` runs them all,
so one run reports every problem. The loader runs them even beside documents that failed to
build (``Spec.unbuilt`` says what those would have declared), so a broken document never hides
a rule violation in another.

The rules are grouped by what they look at, one module each:

- ``locating``: shared helpers (locate a problem, report an undeclared reference) and names;
- ``naming``: modules, slugs and identifiers, roles and permission names;
- ``fields``: an entity's fields, child rows, copied values, cache, extensions;
- ``behaviour``: actions, events and deliveries, the state machine and approvals;
- ``reserved``: what a re-declared standard action may change;
- ``summaries``: what a summary entity aggregates;
- ``scoping``: row scope, the create scope, backdating;
- ``references``: UI views, apps, module dependencies, workspaces;
- ``formulas``: expressions and the names they read;
- ``contexts``: a page's contexts (ContextDecl);
- ``consuming``: what apps offer each other (``interfaces``) and use (``consumes``);
- ``signins``: a workspace's OpenID providers.
"""

from __future__ import annotations

from dap.config.errors import Problem
from dap.config.specs import Spec
from dap.config.validation import (
    behaviour,
    consuming,
    contexts,
    fields,
    formulas,
    locating,
    naming,
    references,
    reserved,
    scoping,
    signins,
    summaries,
)
from dap.config.validation.formulas import CONTEXT_ROOTS
from dap.config.validation.locating import FILTERABLE_SYSTEM_FIELDS, SYSTEM_FIELDS, Rule
from dap.config.validation.scoping import SESSION_OPS

__all__ = [
    "CONTEXT_ROOTS",
    "FILTERABLE_SYSTEM_FIELDS",
    "RULES",
    "SESSION_OPS",
    "SYSTEM_FIELDS",
    "Rule",
    "check",
    "locating",
]

RULES: tuple[Rule, ...] = (
    naming.modules_exist,
    naming.names_are_identifiers,
    fields.field_rules,
    fields.cache_ttl_in_range,
    fields.extension_rules,
    behaviour.action_and_event_rules,
    reserved.reserved_action_rules,
    summaries.summary_rules,
    behaviour.state_machine_rules,
    scoping.row_scope_rules,
    naming.role_rules,
    naming.permission_names,
    references.ui_reference_rules,
    references.app_rules,
    formulas.expression_rules,
    contexts.page_context_rules,
    consuming.interface_rules,
    consuming.consume_rules,
    consuming.page_call_rules,
    signins.provider_rules,
)


def check(spec: Spec) -> list[Problem]:
    """Every problem the cross-document rules find in ``spec``."""
    return [problem for rule in RULES for problem in rule(spec)]
