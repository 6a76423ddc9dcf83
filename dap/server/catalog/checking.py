"""Manifest expressions and field rules as the server applies them. Pure.

Expressions (formulas, *_when, conditions, expression rules) are parsed once when the catalog is
built; a text that does not parse (the validator refuses those, a hand-built catalog may not) is
kept as its error and fails where it is evaluated, naming its field. A :class:`Rule` is one
``ValidationRule`` of a field, compiled (patterns, expressions); :func:`problem` says why a value
breaks it, with the rule's message when one is declared.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import InvalidOperation
from typing import Any

from dap.config import expressions
from dap.config.expressions import Expression, ExpressionError
from dap.config.fields import ValidationRule
from dap.server import fieldvalues

Compiled = Expression | ExpressionError  # a manifest expression, or why it could not be parsed


def compile_expression(source: str) -> Compiled:
    try:
        return expressions.parse(source)
    except ExpressionError as exc:  # the validator refuses these; a hand-built catalog may not
        return exc


def evaluate(check: Compiled, ctx: Mapping[str, Any], now: dt.datetime) -> Any:
    if isinstance(check, ExpressionError):
        raise check
    return expressions.evaluate(check, ctx, now=now)


def condition(check: Compiled, ctx: Mapping[str, Any], now: dt.datetime) -> bool:
    if isinstance(check, ExpressionError):
        raise check
    return expressions.evaluate_condition(check, ctx, now=now)


@dataclass(frozen=True)
class Rule:
    field: str
    decl: ValidationRule
    check: Compiled | re.Pattern[str] | None = None  # expression rules and patterns, compiled once
    broken: str | None = None  # why the declaration cannot be applied (e.g. an invalid pattern)


def rule_of(name: str, decl: ValidationRule) -> Rule:
    if decl.rule == "expression":
        if not isinstance(decl.value, str):
            return Rule(name, decl, broken="an expression rule needs the expression as its value")
        return Rule(name, decl, check=compile_expression(decl.value))
    if decl.rule == "pattern":
        try:
            return Rule(name, decl, check=re.compile(str(decl.value)))
        except re.error as exc:
            return Rule(name, decl, broken=f"the manifest's pattern {decl.value!r} is invalid ({exc})")
    return Rule(name, decl)


def problem(rule: Rule, value: Any, ctx: Mapping[str, Any], now: dt.datetime) -> str | None:
    """The failure message of ``rule`` on ``value``, or ``None`` when it holds."""
    decl = rule.decl
    if rule.broken is not None:
        return rule.broken
    if decl.rule == "expression":
        assert rule.check is not None
        assert not isinstance(rule.check, re.Pattern)
        try:
            holds = condition(rule.check, ctx, now)
        except ExpressionError as exc:
            return f"the rule {decl.value!r} could not be evaluated: {exc}"
        return None if holds else decl.message or f"must satisfy {decl.value}"
    if value is None:
        return None
    try:
        if decl.rule in ("min", "max"):
            order = fieldvalues.compare(value, decl.value)
            if decl.rule == "min" and order < 0:
                return decl.message or f"must be at least {decl.value}"
            if decl.rule == "max" and order > 0:
                return decl.message or f"must be at most {decl.value}"
        elif decl.rule in ("min_length", "max_length"):
            size, bound = len(value), int(decl.value)
            unit = "item(s)" if isinstance(value, list) else "character(s)"
            if decl.rule == "min_length" and size < bound:
                return decl.message or f"must have at least {bound} {unit}"
            if decl.rule == "max_length" and size > bound:
                return decl.message or f"must have at most {bound} {unit}"
        elif decl.rule == "pattern":
            assert isinstance(rule.check, re.Pattern)
            if not isinstance(value, str) or rule.check.search(value) is None:
                return decl.message or f"must match the pattern {decl.value}"
    except (TypeError, ValueError, InvalidOperation):
        return f"the rule {decl.rule} {decl.value!r} does not apply to this value"
    return None
