r"""A small, safe expression language for manifests: computed formulas, *_when rules and conditions.

The same text is used twice: the manifest validator parses it (`parse`) to reject bad syntax and to
check `Expression.references()` against the entity's fields, and the server evaluates it
(`evaluate`, `evaluate_condition`) on a record for `computed.formula`, `required_when`,
`readonly_when`, `visible_when`, `ActionUIHint.show_when`, `ApprovalStep.when` and action conditions.

Why not Python's eval: manifests are uploaded by tenants, and `eval` (even with empty builtins)
reaches attribute access, dunder escapes, huge exponentiation and unbounded recursion. Here the
grammar has no attribute access beyond data lookup, no imports, a fixed whitelist of functions, a
source length limit and a nesting limit; a hostile expression gets an `ExpressionError`, never a
`RecursionError` or a hung process. The parsing half lives in `dap.config.expression_parsing`
(re-exported here) so each module stays small.

Grammar (lowest precedence first; precedence as in Python, but comparisons do not chain)::

    expression  = or_expr
    or_expr     = and_expr { "or" and_expr }
    and_expr    = not_expr { "and" not_expr }
    not_expr    = "not" not_expr | comparison
    comparison  = sum [ ("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "not" "in") sum ]
    sum         = term { ("+" | "-") term }
    term        = unary { ("*" | "/" | "%") unary }
    unary       = "-" unary | primary
    primary     = NUMBER | STRING | "true" | "false" | "null"
                | NAME "(" [ arguments ] ")"             (whitelisted functions only)
                | NAME                                     (dotted: doc.customer, lines.amount)
                | "[" [ arguments ] "]" | "(" expression ")"
    arguments   = expression { "," expression } [ "," ]
    NUMBER      = digits [ "." digits ]                    (with a "." it is a Decimal, never a float)
    STRING      = '...' | "..."                            (escapes \\ \' \" \n \t \r \uXXXX)
    NAME        = ident { "." ident },  ident = [A-Za-z_][A-Za-z0-9_]*   (not a keyword: and or
                  not in true false null; a field named like a function is fine without "(")

Functions: round(x, n=0) (ROUND_HALF_UP), abs, min, max, len, today(), now(), coalesce(a, b, ...),
sum(rows.field), count(rows), if(cond, a, b), lower, upper, concat(a, b, ...).

Values and the None rules (SQL-like, so a half-filled form evaluates quietly):

- A name missing from the context is None. `doc.customer` looks up "doc" then "customer"; through a
  list of rows it projects, so `lines.amount` is the list of every row's amount. Floats in the
  context become Decimals (via their shortest repr).
- Arithmetic with None is None (`None + 1` is None); so are unary minus, abs, round, len, lower,
  upper of None. Ints stay ints under + - * %; `/` always gives a Decimal; ints and Decimals mix
  exactly (Decimal results keep 34 significant digits). Division by zero is an
  ExpressionEvalError. `%` follows Python (the result takes the sign of the divisor).
- `==` and `!=` are null-aware (`x == null`); values of different types are simply unequal; a
  boolean never equals a number. `<`, `<=`, `>`, `>=` with None are False; ordering values of
  different types is an error naming the operator and both types.
- `and`, `or`, `not`, `if()` take booleans, with None counting as false; anything else is an error.
  `and`/`or` short-circuit and so do `if()` and `coalesce()`.
- `x in [..]` uses `==` (so `null in [null]` is true); `not in` is its negation. A string on the
  right means substring.
- Aggregates skip None like SQL: sum() of nothing is 0, count() counts non-None items, min() and
  max() ignore None (one list argument means its items), coalesce() returns the first non-None.
- date - date is the number of days (int); date + int and date - int move by days (also datetime).
- concat() turns None into "" and numbers, booleans and dates into text.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Final, TypeAlias, TypeGuard

from dap.config.expression_parsing import (
    FUNCTIONS,
    MAX_DEPTH,
    MAX_SOURCE_LENGTH,
    Binary,
    Call,
    Constant,
    Expression,
    ExpressionError,
    ExpressionEvalError,
    ExpressionSyntaxError,
    ListLiteral,
    Name,
    Node,
    Unary,
    iter_nodes,
    parse,
    render,
)

__all__ = [
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_SOURCE_LENGTH",
    "Binary",
    "Call",
    "Constant",
    "Expression",
    "ExpressionError",
    "ExpressionEvalError",
    "ExpressionSyntaxError",
    "ListLiteral",
    "Name",
    "Node",
    "Unary",
    "evaluate",
    "evaluate_condition",
    "iter_nodes",
    "parse",
    "render",
]

# Decimal arithmetic uses its own context so a caller's thread-local decimal settings cannot change
# results; 34 digits is IEEE decimal128, ample for money.
_DECIMALS: Final = decimal.Context(
    prec=34,
    rounding=decimal.ROUND_HALF_EVEN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
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
    return _truth(result, "a condition", expression.root)


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
            if not _truth(_eval(node.left, scope), "'and'", node):
                return False
            return _truth(_eval(node.right, scope), "'and'", node)
        case Binary(op="or"):
            if _truth(_eval(node.left, scope), "'or'", node):
                return True
            return _truth(_eval(node.right, scope), "'or'", node)
        case Binary():
            return _BINARY[node.op](_eval(node.left, scope), _eval(node.right, scope), node)
        case Unary(op="not"):
            return not _truth(_eval(node.operand, scope), "'not'", node)
        case Unary():
            value = _eval(node.operand, scope)
            if value is None:
                return None
            if isinstance(value, Decimal):
                return _DECIMALS.minus(value)
            if _is_number(value):
                return -value
            raise _type_error(node, "cannot negate", value)
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
            raise _type_error(node, f"cannot read {parts[index]!r} of {owner!r}", value)
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


# --- Helpers for types ---------------------------------------------------------------------------


def _is_number(value: object) -> TypeGuard[int | Decimal]:
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


def _is_plain_date(value: object) -> bool:
    return isinstance(value, date) and not isinstance(value, datetime)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


_TYPE_NAMES: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (bool, "boolean"),
    (int, "integer"),
    (Decimal, "decimal"),
    (str, "string"),
    (datetime, "datetime"),
    (date, "date"),
    ((list, tuple), "list"),
    (Mapping, "record"),
)


def _type_error(node: Node, what: str, *values: object) -> ExpressionEvalError:
    types = " and ".join(_type_name(value) for value in values)
    return ExpressionEvalError(f"{what} {types}", node.position)


def _truth(value: object, user: str, node: Node) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise ExpressionEvalError(f"{user} expects true, false or null, got {_type_name(value)}", node.position)


def _days(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return None


# --- Operators -----------------------------------------------------------------------------------


def _arithmetic(op: str, left: object, right: object, node: Binary) -> object:
    if left is None or right is None:
        return None
    try:
        if _is_number(left) and _is_number(right):
            return _numbers(op, left, right, node)
        if op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if op in ("+", "-") and isinstance(left, date) and _days(right) is not None:
            shift = timedelta(days=_days(right) or 0)
            return left + shift if op == "+" else left - shift
        if op == "+" and _days(left) is not None and isinstance(right, date):
            return right + timedelta(days=_days(left) or 0)
        if op == "-" and _is_plain_date(left) and _is_plain_date(right):
            return (left - right).days  # type: ignore[operator]
    except OverflowError:
        raise ExpressionEvalError(f"date out of range in {op!r}", node.position) from None
    except decimal.DecimalException as exc:
        raise ExpressionEvalError(f"{op!r} failed: {type(exc).__name__}", node.position) from None
    raise _type_error(node, f"cannot apply {op!r} to", left, right)


def _numbers(op: str, left: int | Decimal, right: int | Decimal, node: Node) -> int | Decimal:
    if op in ("/", "%") and right == 0:
        raise ExpressionEvalError(f"division by zero in {op!r}", node.position)
    if isinstance(left, int) and isinstance(right, int):
        if op == "/":
            return _DECIMALS.divide(Decimal(left), Decimal(right))
        return {"+": left + right, "-": left - right, "*": left * right}[op] if op != "%" else left % right
    if op == "+":
        return _DECIMALS.add(left, right)
    if op == "-":
        return _DECIMALS.subtract(left, right)
    if op == "*":
        return _DECIMALS.multiply(left, right)
    if op == "/":
        return _DECIMALS.divide(left, right)
    remainder = _DECIMALS.remainder(left, right)  # sign of the dividend; Python's % follows the divisor
    if remainder and (remainder < 0) != (right < 0):
        remainder = _DECIMALS.add(remainder, right)
    return remainder


def _equal(left: object, right: object) -> bool:
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return left == right
    if isinstance(left, datetime) or isinstance(right, datetime):
        return isinstance(left, datetime) and isinstance(right, datetime) and left == right
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_equal, left, right))
    if type(left) is not type(right) and not (isinstance(left, str) and isinstance(right, str)):
        return isinstance(left, Mapping) and isinstance(right, Mapping) and left == right
    return left == right


def _less(left: object, right: object, node: Node, op: str) -> bool:
    """left < right for two non-None values of one ordered type, else an error naming both types."""
    comparable = (
        (_is_number(left) and _is_number(right))
        or (isinstance(left, str) and isinstance(right, str))
        or (_is_plain_date(left) and _is_plain_date(right))
        or (isinstance(left, datetime) and isinstance(right, datetime))
    )
    if comparable:
        try:
            return left < right  # type: ignore[operator,no-any-return]
        except TypeError:  # naive and aware datetimes
            pass
    raise _type_error(node, f"cannot compare with {op!r}:", left, right)


def _order(op: str, left: object, right: object, node: Binary) -> bool:
    if left is None or right is None:
        return False
    if op == "<":
        return _less(left, right, node, op)
    if op == ">":
        return _less(right, left, node, op)
    if op == "<=":
        return not _less(right, left, node, op)
    return not _less(left, right, node, op)


def _member(needle: object, haystack: object, node: Binary) -> bool:
    if haystack is None:
        return False
    if isinstance(haystack, list | tuple):
        return any(_equal(needle, item) for item in haystack)
    if isinstance(haystack, str) and (needle is None or isinstance(needle, str)):
        return needle is not None and needle in haystack
    raise _type_error(node, f"{node.op!r} needs a list or a string on the right; got", needle, haystack)


def _equal_op(left: object, right: object, node: Binary) -> bool:
    return _equal(left, right)


def _not_equal_op(left: object, right: object, node: Binary) -> bool:
    return not _equal(left, right)


def _not_member(left: object, right: object, node: Binary) -> bool:
    return not _member(left, right, node)


_BinaryFunction: TypeAlias = Callable[[object, object, Binary], object]
_BINARY: Final[Mapping[str, _BinaryFunction]] = {
    **{op: functools.partial(_arithmetic, op) for op in "+-*/%"},
    **{op: functools.partial(_order, op) for op in ("<", "<=", ">", ">=")},
    "==": _equal_op,
    "!=": _not_equal_op,
    "in": _member,
    "not in": _not_member,
}


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
    if not _is_number(value):
        raise _type_error(node, "round() expects a number, got", value)
    digits = _days(places)
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
        rounded = Decimal(value).quantize(exponent, rounding=decimal.ROUND_HALF_UP, context=_DECIMALS)
        if digits < 0:
            rounded = rounded.quantize(Decimal(1), context=_DECIMALS)
    except decimal.DecimalException:
        raise ExpressionEvalError(
            f"round() result has more than {_DECIMALS.prec} digits", node.position
        ) from None
    return int(rounded) if isinstance(value, int) else rounded


def _abs(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, Decimal):
        return _DECIMALS.abs(value)
    if _is_number(value):
        return abs(value)
    raise _type_error(node, "abs() expects a number, got", value)


def _extreme(node: Call, scope: _Scope) -> object:
    values = _args(node, scope)
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    best: object = None
    for value in values:
        if value is None:
            continue
        if best is None:
            _less(value, value, node, f"{node.function}()")  # checks that the type is ordered
            best = value
        elif (
            _less(best, value, node, "max()") if node.function == "max" else _less(value, best, node, "min()")
        ):
            best = value
    return best


def _len(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, str | list):
        return len(value)
    raise _type_error(node, "len() expects a string or a list, got", value)


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
        raise _type_error(node, "sum() expects a list such as sum(lines.amount), got", values)
    total: int | Decimal = 0
    for value in values:
        if value is None:
            continue
        if not _is_number(value):
            raise _type_error(node, "sum() expects numbers, got", value)
        total = _numbers("+", total, value, node)
    return total


def _count(node: Call, scope: _Scope) -> object:
    values = _eval(node.args[0], scope)
    if values is None:
        return 0
    if not isinstance(values, list):
        raise _type_error(node, "count() expects a list such as count(lines), got", values)
    return sum(value is not None for value in values)


def _if(node: Call, scope: _Scope) -> object:
    condition = _truth(_eval(node.args[0], scope), "if()", node)
    return _eval(node.args[1] if condition else node.args[2], scope)


def _case(node: Call, scope: _Scope) -> object:
    value = _eval(node.args[0], scope)
    if value is None:
        return None
    if isinstance(value, str):
        return value.lower() if node.function == "lower" else value.upper()
    raise _type_error(node, f"{node.function}() expects a string, got", value)


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
    raise _type_error(node, "concat() cannot turn into text a", value)


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
