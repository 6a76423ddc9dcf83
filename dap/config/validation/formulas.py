"""Rules on expressions: every formula, *_when rule, condition and form ``compute`` parses, and
each name it reads is a field of its row or a context root.
"""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import expressions
from dap.config import manifests as m
from dap.config.errors import Problem
from dap.config.fields import Field
from dap.config.specs import Spec
from dap.config.validation import locating

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
        yield locating.at(spec, owner, path, f"invalid expression {source!r}: {exc}")
        return
    for reference in sorted(parsed.references()):
        head, _, rest = reference.partition(".")
        if head in CONTEXT_ROOTS:
            continue
        if head not in names:
            yield locating.at(
                spec, owner, path, f"expression {source!r} uses {head!r}, which is not a field here"
            )
            continue
        sub = rest.partition(".")[0]
        if sub and names[head] and sub not in names[head]:
            yield locating.at(
                spec, owner, path, f"expression {source!r} uses {reference!r}: {head} rows have no {sub!r}"
            )


def _names(
    fields: tuple[Field, ...], outer: dict[str, frozenset[str]] | None = None
) -> dict[str, frozenset[str]]:
    """Field names usable in an expression, each with the row fields of a child field (else empty)."""
    names = dict(outer or {})
    names.update({name: frozenset() for name in locating.SYSTEM_FIELDS})
    for field in fields:
        rows = field.child.fields if field.child is not None else ()
        names[field.name] = frozenset(f.name for f in rows)
    return names


def expression_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        es = entity.spec
        top = _names(es.fields)
        for base, siblings in locating.field_lists(es):
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
                            yield locating.at(
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
