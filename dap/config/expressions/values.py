"""What values mean in manifest expressions: types, truth, and the binary operators. Pure.

The semantics (SQL-like None, exact decimals, dates moved by days, null-aware equality) are
described in `dap.config.expressions`; `evaluating` walks a tree and calls these.
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Final, TypeAlias, TypeGuard

from dap.config.expressions.trees import (
    Binary,
    ExpressionEvalError,
    Node,
)

# Decimal arithmetic uses its own context so a caller's thread-local decimal settings cannot change
# results; 34 digits is IEEE decimal128, ample for money.
DECIMALS: Final = decimal.Context(
    prec=34,
    rounding=decimal.ROUND_HALF_EVEN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)


# --- Helpers for types ---------------------------------------------------------------------------


def is_number(value: object) -> TypeGuard[int | Decimal]:
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


def is_plain_date(value: object) -> bool:
    return isinstance(value, date) and not isinstance(value, datetime)


def type_name(value: object) -> str:
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


def type_error(node: Node, what: str, *values: object) -> ExpressionEvalError:
    types = " and ".join(type_name(value) for value in values)
    return ExpressionEvalError(f"{what} {types}", node.position)


def truth(value: object, user: str, node: Node) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise ExpressionEvalError(f"{user} expects true, false or null, got {type_name(value)}", node.position)


def days(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return None


# --- Operators -----------------------------------------------------------------------------------


def arithmetic(op: str, left: object, right: object, node: Binary) -> object:
    if left is None or right is None:
        return None
    try:
        if is_number(left) and is_number(right):
            return numbers(op, left, right, node)
        if op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if op in ("+", "-") and isinstance(left, date) and days(right) is not None:
            shift = timedelta(days=days(right) or 0)
            return left + shift if op == "+" else left - shift
        if op == "+" and days(left) is not None and isinstance(right, date):
            return right + timedelta(days=days(left) or 0)
        if op == "-" and is_plain_date(left) and is_plain_date(right):
            return (left - right).days  # type: ignore[operator]
    except OverflowError:
        raise ExpressionEvalError(f"date out of range in {op!r}", node.position) from None
    except decimal.DecimalException as exc:
        raise ExpressionEvalError(f"{op!r} failed: {type(exc).__name__}", node.position) from None
    raise type_error(node, f"cannot apply {op!r} to", left, right)


def numbers(op: str, left: int | Decimal, right: int | Decimal, node: Node) -> int | Decimal:
    if op in ("/", "%") and right == 0:
        raise ExpressionEvalError(f"division by zero in {op!r}", node.position)
    if isinstance(left, int) and isinstance(right, int):
        if op == "/":
            return DECIMALS.divide(Decimal(left), Decimal(right))
        return {"+": left + right, "-": left - right, "*": left * right}[op] if op != "%" else left % right
    if op == "+":
        return DECIMALS.add(left, right)
    if op == "-":
        return DECIMALS.subtract(left, right)
    if op == "*":
        return DECIMALS.multiply(left, right)
    if op == "/":
        return DECIMALS.divide(left, right)
    remainder = DECIMALS.remainder(left, right)  # sign of the dividend; Python's % follows the divisor
    if remainder and (remainder < 0) != (right < 0):
        remainder = DECIMALS.add(remainder, right)
    return remainder


def equal(left: object, right: object) -> bool:
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if is_number(left) and is_number(right):
        return left == right
    if isinstance(left, datetime) or isinstance(right, datetime):
        return isinstance(left, datetime) and isinstance(right, datetime) and left == right
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(equal, left, right))
    if type(left) is not type(right) and not (isinstance(left, str) and isinstance(right, str)):
        return isinstance(left, Mapping) and isinstance(right, Mapping) and left == right
    return left == right


def less(left: object, right: object, node: Node, op: str) -> bool:
    """left < right for two non-None values of one ordered type, else an error naming both types."""
    comparable = (
        (is_number(left) and is_number(right))
        or (isinstance(left, str) and isinstance(right, str))
        or (is_plain_date(left) and is_plain_date(right))
        or (isinstance(left, datetime) and isinstance(right, datetime))
    )
    if comparable:
        try:
            return left < right  # type: ignore[operator,no-any-return]
        except TypeError:  # naive and aware datetimes
            pass
    raise type_error(node, f"cannot compare with {op!r}:", left, right)


def order(op: str, left: object, right: object, node: Binary) -> bool:
    if left is None or right is None:
        return False
    if op == "<":
        return less(left, right, node, op)
    if op == ">":
        return less(right, left, node, op)
    if op == "<=":
        return not less(right, left, node, op)
    return not less(left, right, node, op)


def member(needle: object, haystack: object, node: Binary) -> bool:
    if haystack is None:
        return False
    if isinstance(haystack, list | tuple):
        return any(equal(needle, item) for item in haystack)
    if isinstance(haystack, str) and (needle is None or isinstance(needle, str)):
        return needle is not None and needle in haystack
    raise type_error(node, f"{node.op!r} needs a list or a string on the right; got", needle, haystack)


def _equal_op(left: object, right: object, node: Binary) -> bool:
    return equal(left, right)


def _not_equal_op(left: object, right: object, node: Binary) -> bool:
    return not equal(left, right)


def _not_member(left: object, right: object, node: Binary) -> bool:
    return not member(left, right, node)


_BinaryFunction: TypeAlias = Callable[[object, object, Binary], object]
BINARY: Final[Mapping[str, _BinaryFunction]] = {
    **{op: functools.partial(arithmetic, op) for op in "+-*/%"},
    **{op: functools.partial(order, op) for op in ("<", "<=", ">", ">=")},
    "==": _equal_op,
    "!=": _not_equal_op,
    "in": member,
    "not in": _not_member,
}
