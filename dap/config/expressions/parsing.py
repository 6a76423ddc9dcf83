"""The syntax half of manifest expressions: the tokenizer, the parser and the renderer.

`dap.config.expressions` is the public face (it re-exports these names and adds evaluation); the
grammar and the semantics are described there, the tree and the errors in `trees`. This
module knows nothing about values beyond literals, so the manifest validator can parse and check
an expression without evaluating it.

The parser is a hand-written Pratt parser over a flat token list. It never recurses more than a
bounded number of Python frames: the source is capped at `MAX_SOURCE_LENGTH` characters, the
nesting of parentheses, brackets, calls and prefix operators at `MAX_DEPTH`, and so is the depth of
the tree it builds (`a + a + ... + a` is a deep left-leaning tree although it has no parentheses),
so evaluation, `references()` and `render()` cannot overflow the stack either.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from decimal import Decimal
from typing import Final, Literal, TypeAlias, cast

from dap.config.expressions.trees import (
    FUNCTIONS,
    KEYWORDS,
    MAX_DEPTH,
    MAX_SOURCE_LENGTH,
    Binary,
    BinaryOp,
    Call,
    Constant,
    ConstantValue,
    Expression,
    ExpressionSyntaxError,
    ListLiteral,
    Name,
    Node,
    Unary,
    UnaryOp,
)

# --- Tokens ----------------------------------------------------------------------------------------

TokenKind: TypeAlias = Literal["number", "string", "name", "keyword", "op", "end"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    kind: TokenKind
    text: str
    position: int
    value: ConstantValue = None


_OPERATORS: Final = ("==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "(", ")", "[", "]", ",")
_MISTAKES: Final = {
    "&&": "use 'and'",
    "||": "use 'or'",
    "=": "use '==' to compare",
    "!": "use 'not' to negate or '!=' to compare",
}
_ESCAPES: Final = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


_DIGITS: Final = frozenset("0123456789")  # str.isdigit() also accepts "²" and other scripts' digits


def _is_name_start(char: str) -> bool:
    return char == "_" or (char.isascii() and char.isalpha())


def _is_name_char(char: str) -> bool:
    return char == "_" or (char.isascii() and char.isalnum())


def _tokenize(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    index, length = 0, len(source)
    while index < length:
        char = source[index]
        start = index
        if char in " \t\r\n":
            index += 1
        elif char in _DIGITS:
            index = _scan_number(source, index, tokens)
        elif char in "'\"":
            index = _scan_string(source, index, tokens)
        elif _is_name_start(char):
            while True:
                while index < length and _is_name_char(source[index]):
                    index += 1
                if index < length and source[index] == ".":
                    if index + 1 < length and _is_name_start(source[index + 1]):
                        index += 1
                        continue
                    raise ExpressionSyntaxError("expected a field name after '.'", index + 1)
                break
            text = source[start:index]
            tokens.append(_Token("keyword" if text in KEYWORDS else "name", text, start))
        else:
            for mistake, hint in _MISTAKES.items():
                if source.startswith(mistake, index) and not source.startswith(mistake + "=", index):
                    raise ExpressionSyntaxError(f"'{mistake}' is not an operator; {hint}", index)
            op = next((op for op in _OPERATORS if source.startswith(op, index)), None)
            if op is None:
                raise ExpressionSyntaxError(f"unexpected character {char!r}", index)
            tokens.append(_Token("op", op, start))
            index += len(op)
    tokens.append(_Token("end", "", length))
    return tokens


def _scan_number(source: str, index: int, tokens: list[_Token]) -> int:
    start, length = index, len(source)
    while index < length and source[index] in _DIGITS:
        index += 1
    is_decimal = index < length and source[index] == "."
    if is_decimal:
        index += 1
        if index >= length or source[index] not in _DIGITS:
            raise ExpressionSyntaxError("expected digits after the decimal point", index)
        while index < length and source[index] in _DIGITS:
            index += 1
    if index < length and (_is_name_char(source[index]) or source[index] == "."):
        raise ExpressionSyntaxError(f"unexpected {source[index]!r} after a number", index)
    text = source[start:index]
    tokens.append(_Token("number", text, start, Decimal(text) if is_decimal else int(text)))
    return index


def _scan_string(source: str, index: int, tokens: list[_Token]) -> int:
    start, quote, length = index, source[index], len(source)
    chars: list[str] = []
    index += 1
    while True:
        if index >= length:
            raise ExpressionSyntaxError(f"unterminated string (expected a closing {quote})", start)
        char = source[index]
        if char == quote:
            break
        if char == "\\":
            code = source[index + 1 : index + 2]
            if code in _ESCAPES:
                chars.append(_ESCAPES[code])
                index += 2
                continue
            digits = source[index + 2 : index + 6]
            if code == "u" and len(digits) == 4 and all(c in "0123456789abcdefABCDEF" for c in digits):
                chars.append(chr(int(digits, 16)))
                index += 6
                continue
            raise ExpressionSyntaxError(
                "invalid escape; expected one of \\\\ \\' \\\" \\n \\t \\r \\uXXXX", index
            )
        chars.append(char)
        index += 1
    tokens.append(_Token("string", source[start : index + 1], start, "".join(chars)))
    return index + 1


# --- Parsing ---------------------------------------------------------------------------------------

_COMPARISON: Final = 40
_NOT_POWER: Final = 30
_UNARY_MINUS_POWER: Final = 70
_ATOM_POWER: Final = 100
_POWERS: Final[Mapping[str, int]] = {
    "or": 10,
    "and": 20,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">=", "in", "not in"), _COMPARISON),
    "+": 50,
    "-": 50,
    "*": 60,
    "/": 60,
    "%": 60,
}
_VALUE_HINT: Final = "a value (number, string, true, false, null, field name, function call, '(' or '[')"


def _describe(token: _Token) -> str:
    return "end of the expression" if token.kind == "end" else repr(token.text)


class _Parser:
    def __init__(self, source: str) -> None:
        self._tokens = _tokenize(source)
        self._index = 0
        self._nesting = 0

    def parse(self) -> Node:
        node = self._expression(0)
        token = self._tokens[self._index]
        if token.kind != "end":
            raise ExpressionSyntaxError(
                f"unexpected {_describe(token)}; expected an operator or the end of the expression",
                token.position,
            )
        return node

    def _peek(self, ahead: int = 0) -> _Token:
        return self._tokens[min(self._index + ahead, len(self._tokens) - 1)]

    def _advance(self) -> _Token:
        token = self._tokens[self._index]
        self._index += 1
        return token

    def _is(self, token: _Token, kind: TokenKind, text: str) -> bool:
        return token.kind == kind and token.text == text

    def _enter(self, token: _Token) -> None:
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            raise ExpressionSyntaxError(
                f"expression is nested too deeply (limit {MAX_DEPTH})", token.position
            )

    def _built(self, node: Node) -> Node:
        if node.depth > MAX_DEPTH:
            raise ExpressionSyntaxError(f"expression is nested too deeply (limit {MAX_DEPTH})", node.position)
        return node

    def _expression(self, min_power: int) -> Node:
        left = self._prefix(min_power)
        chained = False
        while True:
            token = self._peek()
            op = self._infix_operator(token)
            if op is None or _POWERS[op] <= min_power:
                return left
            power = _POWERS[op]
            if power == _COMPARISON and chained:
                raise ExpressionSyntaxError(
                    f"comparisons cannot be chained; combine them with 'and' (found {op!r})", token.position
                )
            self._index += 2 if op == "not in" else 1
            right = self._expression(power)
            left = self._built(Binary(cast(BinaryOp, op), left, right, token.position))
            chained = power == _COMPARISON

    def _infix_operator(self, token: _Token) -> str | None:
        if token.kind == "op" and token.text in _POWERS:
            return token.text
        if token.kind != "keyword" or token.text not in ("and", "or", "in", "not"):
            return None
        if token.text != "not":
            return token.text
        if not self._is(self._peek(1), "keyword", "in"):
            raise ExpressionSyntaxError(
                f"expected 'in' after 'not', found {_describe(self._peek(1))}", self._peek(1).position
            )
        return "not in"

    def _prefix(self, min_power: int) -> Node:
        token = self._advance()
        if token.kind in ("number", "string"):
            return Constant(token.value, token.position)
        if token.kind == "keyword" and token.text in ("true", "false", "null"):
            return Constant({"true": True, "false": False, "null": None}[token.text], token.position)
        if token.kind == "name":
            if self._is(self._peek(), "op", "("):
                return self._call(token)
            return Name(token.text, token.position)
        if self._is(token, "op", "("):
            self._enter(token)
            node = self._expression(0)
            self._expect(")", token)
            return node
        if self._is(token, "op", "["):
            return self._built(ListLiteral(self._sequence(token, "]"), token.position))
        if self._is(token, "op", "-") or self._is(token, "keyword", "not"):
            if token.text == "not" and min_power > _NOT_POWER:
                raise ExpressionSyntaxError("'not' must be put in parentheses here", token.position)
            self._enter(token)
            operand = self._expression(_NOT_POWER if token.text == "not" else _UNARY_MINUS_POWER)
            self._nesting -= 1
            return self._built(Unary(cast(UnaryOp, token.text), operand, token.position))
        raise ExpressionSyntaxError(f"unexpected {_describe(token)}; expected {_VALUE_HINT}", token.position)

    def _call(self, name: _Token) -> Node:
        if name.text not in FUNCTIONS:
            raise ExpressionSyntaxError(
                f"unknown function {name.text!r}; expected one of {', '.join(sorted(FUNCTIONS))}",
                name.position,
            )
        args = self._sequence(self._advance(), ")")
        low, high = FUNCTIONS[name.text]
        if len(args) < low or (high is not None and len(args) > high):
            wanted = f"{low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
            raise ExpressionSyntaxError(
                f"{name.text}() takes {wanted} argument(s), got {len(args)}", name.position
            )
        return self._built(Call(name.text, args, name.position))

    def _sequence(self, opener: _Token, closer: str) -> tuple[Node, ...]:
        """Comma-separated expressions up to `closer`; a trailing comma is allowed."""
        self._enter(opener)
        items: list[Node] = []
        while not self._is(self._peek(), "op", closer):
            items.append(self._expression(0))
            if not self._is(self._peek(), "op", ","):
                break
            self._index += 1
        self._expect(closer, opener)
        return tuple(items)

    def _expect(self, closer: str, opener: _Token) -> None:
        token = self._advance()
        if not self._is(token, "op", closer):
            raise ExpressionSyntaxError(
                f"expected {closer!r} to close {opener.text!r} from column {opener.position + 1}, "
                f"found {_describe(token)}",
                token.position,
            )
        self._nesting -= 1


@functools.lru_cache(maxsize=1024)
def parse(source: str) -> Expression:
    """Parse an expression; raises ExpressionSyntaxError. Cached: manifests repeat expressions."""
    if len(source) > MAX_SOURCE_LENGTH:
        raise ExpressionSyntaxError(
            f"expression is {len(source)} characters long; the limit is {MAX_SOURCE_LENGTH}",
            MAX_SOURCE_LENGTH,
        )
    if not source.strip():
        raise ExpressionSyntaxError(f"empty expression; expected {_VALUE_HINT}", 0)
    return Expression(source, _Parser(source).parse())


# --- Rendering -------------------------------------------------------------------------------------


def render(node: Node | Expression) -> str:
    """Canonical source text for a tree, with only the parentheses precedence requires."""
    if isinstance(node, Expression):
        node = node.root
    if isinstance(node, Constant):
        return _render_constant(node.value)
    if isinstance(node, Name):
        return node.path
    if isinstance(node, ListLiteral):
        return "[" + ", ".join(render(item) for item in node.items) + "]"
    if isinstance(node, Call):
        return f"{node.function}(" + ", ".join(render(arg) for arg in node.args) + ")"
    if isinstance(node, Unary):
        power = _NOT_POWER if node.op == "not" else _UNARY_MINUS_POWER
        operand = _wrap(node.operand, _power(node.operand) < power)
        return f"not {operand}" if node.op == "not" else f"-{operand}"
    power = _POWERS[node.op]
    left_power = _power(node.left)
    left = _wrap(node.left, left_power < power or (power == _COMPARISON and left_power == power))
    right = _wrap(node.right, _power(node.right) <= power)
    return f"{left} {node.op} {right}"


def _power(node: Node) -> int:
    if isinstance(node, Unary):
        return _NOT_POWER if node.op == "not" else _UNARY_MINUS_POWER
    return _POWERS[node.op] if isinstance(node, Binary) else _ATOM_POWER


def _wrap(node: Node, needed: bool) -> str:
    return f"({render(node)})" if needed else render(node)


def _render_constant(value: ConstantValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
        return f"'{escaped}'"
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text if "." in text else text + ".0"
    return str(value)
