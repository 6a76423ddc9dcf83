"""Evaluating a parsed manifest expression on a record: the tree walk and the whitelisted functions.

The semantics are described in `dap.config.expressions` (the public face, which re-exports
`evaluate` and `evaluate_condition`); what each operator does to values is `values`.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Final

from dap.config.expressions import values as ops
from dap.config.expressions.parsing import parse
from dap.config.expressions.trees import (
    FUNCTIONS,
    Binary,
    Call,
    Constant,
    Expression,
    ExpressionEvalError,
    ListLiteral,
    Name,
    Node,
    Unary,
)

_MAX_ROUND_DIGITS: Final = 34


def evaluate(
    expression: Expression | str,
    context: Mapping[str, object],
    *,
    today: date | None = None,
    now: datetime | None = None,
) -> object:
    """Evaluate on the given values; raises ExpressionEvalError (or ExpressionSyntaxError for text).

    `today`/`now` pin the clock (default: the local date and the current UTC time; a given `now`
    also fixes `today`).
    """
    if isinstance(expression, str):
        expression = parse(expression)
    return _eval(expression.root, _Scope(context, today, now))


def evaluate_condition(
    expression: Expression | str,
    context: Mapping[str, object],
    *,
    today: date | None = None,
    now: datetime | None = None,
) -> bool:
    """Evaluate a *_when rule or condition: true or false, with None (unknown) counting as false."""
    if isinstance(expression, str):
        expression = parse(expression)
    result = _eval(expression.root, _Scope(context, today, now))
    return ops.truth(result, "a condition", expression.root)


@dataclasses.dataclass(slots=True)
class _Scope:
    context: Mapping[str, object]
    fixed_today: date | None
    fixed_now: datetime | None

    def today(self) -> date:
        if self.fixed_today is not None:
            return self.fixed_today
        return self.fixed_now.date() if self.fixed_now is not None else date.today()

    def now(self) -> datetime:
        return self.fixed_now if self.fixed_now is not None else datetime.now(UTC)


def _eval(node: Node, scope: _Scope) -> object:
    match node:
        case Constant():
            return node.value
        case Name():
            return _lookup(node, scope.context)
        case Binary(op="and"):
            if not ops.truth(_eval(node.left, scope), "'and'", node):
                return False
            return ops.truth(_eval(node.right, scope), "'and'", node)
        case Binary(op="or"):
            if ops.truth(_eval(node.left, scope), "'or'", node):
                return True
            return ops.truth(_eval(node.right, scope), "'or'", node)
        case Binary():
            return ops.BINARY[node.op](_eval(node.left, scope), _eval(node.right, scope), node)
        case Unary(op="not"):
            return not ops.truth(_eval(node.operand, scope), "'not'", node)
        case Unary():
            value = _eval(node.operand, scope)
            if value is None:
                return None
            if isinstance(value, Decimal):
                return ops.DECIMALS.minus(value)
            if ops.is_number(value):
                return -value
            raise ops.type_error(node, "cannot negate", value)
        case ListLiteral():
            return [_eval(item, scope) for item in node.items]
        case Call():
            return _CALLS[node.function](node, scope)


def _lookup(node: Name, context: Mapping[str, object]) -> object:
    return _resolve(context, node, 0)


def _resolve(value: object, node: Name, start: int) -> object:
    parts = node.parts
    for index in range(start, len(parts)):
        if value is None:
            return None
        if isinstance(value, Mapping):
            value = value.get(parts[index])
        elif isinstance(value, list | tuple):
            return [_resolve(row, node, index) for row in value]
        else:
            owner = ".".join(parts[:index])
            raise ops.type_error(node, f"cannot read {parts[index]!r} of {owner!r}", value)
    return _normalise(value, node)


def _normalise(value: object, node: Name) -> object:
    if isinstance(value, float | Decimal):
        if not math.isfinite(value):
            raise ExpressionEvalError(f"{node.path!r} holds a non-finite number {value}", node.position)
        return Decimal(repr(value)) if isinstance(value, float) else value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, list) and any(isinstance(item, float) for item in value):
        return [_normalise(item, node) for item in value]
    return value


# --- Functions -----------------------------------------------------------------------------------
# Each takes the call node and the scope and evaluates its own arguments, so if() and coalesce()
# can skip the ones they do not need. The parser has already checked the argument counts.


def _args(node: Call, scope: _Scope) -> list[object]:
    return [_eval(arg, scope) for arg in node.args]


def _round(node: Call, scope: _Scope) -> object:
    args = _args(node, scope)
    value, places = args[0], args[1] if len(args) > 1 else 0
    if value is None or places is None:
        return None
    if not ops.is_number(value):
        raise ops.type_error(node, "round() expects a number, got", value)
    digits = ops.days(places)
    if digits is None or abs(digits) > _MAX_ROUND_DIGITS:
        raise ExpressionEvalError(
            f"round() expects a whole number of places from -{_MAX_ROUND_DIGITS} to "
            f"{_MAX_ROUND_DIGITS}, got {places}",
            node.position,
        )
    if isinstance(value, int) and digits >= 0:
        return value
    try:
        exponent = Decimal(1).scaleb(-digits)
        rounded = Decimal(value).quantize(exponent, rounding=decimal.ROUND_HALF_UP, context=ops.DECIMALS)
        if digits < 0:
            rounded = rounded.quantize(Decimal(1), context=ops.DECIMALS)
    except decimal.DecimalException:
        raise ExpressionEvalError(
            f"round() result has more than {ops.DECIMALS.prec} digits", node.position
        ) from None
    return int(rounded) if isinstance(value, int) else rounded


def _abs(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, Decimal):
        return ops.DECIMALS.abs(value)
    if ops.is_number(value):
        return abs(value)
    raise ops.type_error(node, "abs() expects a number, got", value)


def _extreme(node: Call, scope: _Scope) -> object:
    values = _args(node, scope)
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    best: object = None
    for value in values:
        if value is None:
            continue
        if best is None:
            ops.less(value, value, node, f"{node.function}()")  # checks that the type is ordered
            best = value
        elif (
            ops.less(best, value, node, "max()")
            if node.function == "max"
            else ops.less(value, best, node, "min()")
        ):
            best = value
    return best


def _len(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, str | list):
        return len(value)
    raise ops.type_error(node, "len() expects a string or a list, got", value)


def _coalesce(node: Call, scope: _Scope) -> object:
    for arg in node.args:
        value = _eval(arg, scope)
        if value is not None:
            return value
    return None


def _sum(node: Call, scope: _Scope) -> object:
    values = _eval(node.args[0], scope)
    if values is None:
        return 0
    if not isinstance(values, list):
        raise ops.type_error(node, "sum() expects a list such as sum(lines.amount), got", values)
    total: int | Decimal = 0
    for value in values:
        if value is None:
            continue
        if not ops.is_number(value):
            raise ops.type_error(node, "sum() expects numbers, got", value)
        total = ops.numbers("+", total, value, node)
    return total


def _count(node: Call, scope: _Scope) -> object:
    values = _eval(node.args[0], scope)
    if values is None:
        return 0
    if not isinstance(values, list):
        raise ops.type_error(node, "count() expects a list such as count(lines), got", values)
    return sum(value is not None for value in values)


def _if(node: Call, scope: _Scope) -> object:
    condition = ops.truth(_eval(node.args[0], scope), "if()", node)
    return _eval(node.args[1] if condition else node.args[2], scope)


def _case(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, str):
        return value.lower() if node.function == "lower" else value.upper()
    raise ops.type_error(node, f"{node.function}() expects a string, got", value)


def _concat(node: Call, scope: _Scope) -> object:
    return "".join(_text(value, node) for value in _args(node, scope))


def _text(value: object, node: Call) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, date):
        return value.isoformat()
    raise ops.type_error(node, "concat() cannot turn into text a", value)


_CALLS: Final[Mapping[str, Callable[[Call, _Scope], object]]] = {
    "abs": _abs,
    "coalesce": _coalesce,
    "concat": _concat,
    "count": _count,
    "if": _if,
    "len": _len,
    "lower": _case,
    "max": _extreme,
    "min": _extreme,
    "now": lambda node, scope: scope.now(),
    "round": _round,
    "sum": _sum,
    "today": lambda node, scope: scope.today(),
    "upper": _case,
}
assert set(_CALLS) == set(FUNCTIONS), "every whitelisted function needs an implementation"
