"""The filter language of the logs query (``GET /logs?filter=…`` on the admin listener).

A pure parser: text in, a predicate over window entries (:class:`dap.logs.Entry`) out, or
:class:`FilterError` carrying the 0-based character position of the first thing it could not read,
so that the 400 ``LOGS_FILTER_INVALID`` answer can point at it. Kept apart from the window and the
HTTP handler because the grammar is the part users write and get wrong, and it is tested alone.

Grammar (words are case-insensitive; whitespace separates terms)::

    filter := or
    or     := and ("or" and)*
    and    := unary (["and"] unary)*          two terms side by side: both must hold
    unary  := "not" unary | "(" or ")" | term
    term   := FIELD OP VALUE | VALUE          a bare value: case-insensitive text match on msg
    FIELD  := level | workspace | logger | request | trace | span | msg | ts | any other key
    OP     := "=" | "!=" | "~" | ">=" | "<=" | ">" | "<"
    VALUE  := a bare word (no blank, quote, parenthesis or operator character) | "double quoted"

- ``level``: ``debug < info < warn(ing) < error``; ``level>=warn`` is warnings and errors.
- ``logger=dap.server.events`` matches that logger and its children; ``~`` is a substring.
- ``request`` and ``trace`` compare with ``request_id`` and ``trace_id``, ``span`` with ``span_id``.
- ``ts``: ISO 8601 time (``ts>=2026-11-28T10:02:00Z``), with ``<``, ``<=``, ``>``, ``>=`` only.
- ``msg~timeout`` and a bare ``timeout`` are the same: case-insensitive substring of the message.
- Any other key compares with the line's context value of that name, as text (``status=500``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol


class Line(Protocol):
    """What a predicate reads of a log line (``dap.logs.Entry`` has these)."""

    created: float
    levelno: int
    logger: str
    msg: str

    trace_id: str | None
    span_id: str | None
    ctx: dict[str, Any]


Predicate = Callable[[Line], bool]

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
ALIASES = {"request": "request_id", "trace": "trace_id", "span": "span_id"}
OPS = ("!=", ">=", "<=", "=", "~", ">", "<")
_TOKEN = re.compile(
    r'\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<op>!=|>=|<=|=|~|>|<)|"(?P<q>(?:[^"\\]|\\.)*)"|(?P<w>[^\s()"=!~<>]+))'
)
_ORDERED = (">=", "<=", ">", "<")


class FilterError(ValueError):
    """A filter that does not parse: ``position`` is the 0-based offset of the offending character."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})")
        self.message = message
        self.position = position


@dataclass(frozen=True)
class _Tok:
    kind: str  # lp rp op q w end
    text: str
    pos: int


def _tokens(text: str) -> list[_Tok]:
    found: list[_Tok] = []
    at = 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            where = at + (len(text[at:]) - len(text[at:].lstrip()))
            if text[where] == '"':
                raise FilterError('unterminated quoted string: close it with "', where)
            raise FilterError(f"unexpected character {text[where]!r}", where)
        kind = match.lastgroup or "w"
        start = match.start(kind)
        value = match.group(kind)
        if kind == "q":
            value = re.sub(r"\\(.)", r"\1", value)
            start -= 1
        found.append(_Tok(kind, value, start))
        at = match.end()
    found.append(_Tok("end", "", len(text)))
    return found


class _Parser:
    """Recursive descent over the tokens, building the predicate as one Python expression.

    The expression is compiled once into a single function (``parse``): a query reads up to the
    whole window, and one flat function per line is several times faster than a tree of closures.
    Only the parser writes that source: every value of the filter enters it as a ``repr`` literal
    or as a constant in ``names``, never as code.
    """

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.names: dict[str, object] = {}

    def constant(self, value: object) -> str:
        name = f"_c{len(self.names)}"
        self.names[name] = value
        return name

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def word(self, tok: _Tok, *words: str) -> bool:
        return tok.kind == "w" and tok.text.lower() in words

    def parse_or(self) -> str:
        parts = [self.parse_and()]
        while self.word(self.peek(), "or"):
            self.take()
            parts.append(self.parse_and())
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def parse_and(self) -> str:
        parts = [self.parse_unary()]
        while True:
            tok = self.peek()
            if self.word(tok, "and"):
                self.take()
            elif tok.kind in ("end", "rp") or self.word(tok, "or"):
                break
            parts.append(self.parse_unary())
        return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"

    def parse_unary(self) -> str:
        tok = self.peek()
        if self.word(tok, "not"):
            self.take()
            return f"(not {self.parse_unary()})"
        if tok.kind == "lp":
            self.take()
            inner = self.parse_or()
            close = self.take()
            if close.kind != "rp":
                raise FilterError("expected ')' to close the '(' at position " + str(tok.pos), close.pos)
            return inner
        return self.parse_term()

    def parse_term(self) -> str:
        tok = self.take()
        if tok.kind == "end":
            raise FilterError("expected a term (e.g. level>=warn or a word to match)", tok.pos)
        if tok.kind not in ("w", "q"):
            raise FilterError(f"expected a term, found {tok.text or tok.kind!r}", tok.pos)
        if self.peek().kind != "op":
            return self.text(tok.text)
        if tok.kind == "q":
            raise FilterError("a field name is a bare word, not a quoted string", tok.pos)
        op = self.take()
        value = self.take()
        if value.kind not in ("w", "q"):
            raise FilterError(f"expected a value after {op.text!r}", value.pos)
        return self.compare(tok.text.lower(), op, value)

    def text(self, needle: str) -> str:
        search = self.constant(re.compile(re.escape(needle), re.IGNORECASE).search)
        return f"({search}(l.msg) is not None)"

    def compare(self, field: str, op: _Tok, value: _Tok) -> str:
        text = value.text
        if field == "level":
            level = LEVELS.get(text.lower())
            if level is None:
                raise FilterError(f"unknown level {text!r}: use debug, info, warn or error", value.pos)
            return self.ordered("l.levelno", op, level)
        if field == "ts":
            if op.text not in _ORDERED:
                raise FilterError("ts compares with <, <=, > or >= only", op.pos)
            try:
                when = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise FilterError(
                    f"{text!r} is not an ISO 8601 time (e.g. 2026-11-28T10:02:00Z)", value.pos
                ) from None
            return self.ordered(
                "l.created", op, (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
            )
        if op.text in _ORDERED:
            raise FilterError(f"{field} compares with =, != or ~ only (<, > are for level and ts)", op.pos)
        if field == "msg" and op.text == "~":
            return self.text(text)
        if field in ("logger", "msg"):
            read = f"l.{field}"
        elif ALIASES.get(field, field) in ("trace_id", "span_id"):
            read = f"l.{ALIASES.get(field, field)}"
        else:
            read = f"_text(l.ctx.get({ALIASES.get(field, field)!r}))"
        if op.text == "~":
            return f"({text.lower()!r} in ({read} or '').lower())"
        if field == "logger":
            equal = f"({read} == {text!r} or {read}.startswith({text + '.'!r}))"
        elif read.startswith("_text("):  # a context value: the text, or the number or flag it spells
            key = ALIASES.get(field, field)
            spellings = _spellings(text)
            if len(spellings) == 1:
                equal = f"(l.ctx.get({key!r}) == {text!r})"
            else:
                equal = f"(l.ctx.get({key!r}) in {self.constant(spellings)})"
        else:
            equal = f"({read} == {text!r})"
        return f"(not {equal})" if op.text == "!=" else equal

    def ordered(self, read: str, op: _Tok, bound: float) -> str:
        symbol = "==" if op.text == "=" else op.text
        return f"({read} {symbol} {bound!r})"


def _spellings(text: str) -> tuple[object, ...]:
    """The values a context key may hold that ``key=text`` matches: ``status=500`` is 500 too."""
    if re.fullmatch(r"-?\d{1,18}", text):
        return (text, int(text))
    if text in ("true", "false"):
        return (text, text == "true")
    return (text,)


def _text(value: object) -> str | None:
    """A context value as the filter compares it: text (``status=500`` matches the number 500)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse(text: str) -> Predicate | None:
    """The predicate of ``text``, ``None`` for an empty filter (every line); ``FilterError`` else."""
    if not text.strip():
        return None
    parser = _Parser(text)
    source = parser.parse_or()
    rest = parser.peek()
    if rest.kind != "end":
        what = "')' without its '('" if rest.kind == "rp" else repr(rest.text)
        raise FilterError(f"unexpected {what}", rest.pos)
    names: dict[str, object] = {"__builtins__": {}, "_text": _text, **parser.names}
    predicate: Predicate = eval(f"lambda l: {source}", names)  # the parser's own source, never input
    return predicate


def since(text: str, now: float) -> float:
    """``since=`` as an epoch: a duration back from ``now`` (``90s``, ``5m``, ``2h``) or an ISO time."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", text)
    if match is not None:
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return now - float(match.group(1)) * scale
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"since={text!r} is neither a duration (5m, 2h) nor an ISO 8601 time", 0) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
