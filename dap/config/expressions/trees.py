"""The data of manifest expressions: limits, the function whitelist, errors and the syntax tree.

`dap.config.expressions` is the public face (it re-exports these names, parsing and evaluation);
the grammar and the semantics are described there. `parsing` builds these trees from
text and `evaluating` computes them; both depend on this module, never the reverse.

The limits below bound every tree: see `parsing` for how the parser enforces them.

Errors::

    ValueError
    └── ExpressionError             message, position (0-based offset), column (1-based)
        ├── ExpressionSyntaxError   raised by parse()
        └── ExpressionEvalError     raised by evaluate()

`ExpressionError` is a `ValueError` so a pydantic validator can raise it unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Final, Literal, TypeAlias

MAX_SOURCE_LENGTH: Final = 2000
MAX_DEPTH: Final = 64

# Whitelisted functions with their (minimum, maximum) argument counts; None means no maximum.
FUNCTIONS: Final[Mapping[str, tuple[int, int | None]]] = {
    "abs": (1, 1),
    "coalesce": (1, None),
    "concat": (1, None),
    "count": (1, 1),
    "if": (3, 3),
    "len": (1, 1),
    "lower": (1, 1),
    "max": (1, None),
    "min": (1, None),
    "now": (0, 0),
    "round": (1, 2),
    "sum": (1, 1),
    "today": (0, 0),
    "upper": (1, 1),
}

KEYWORDS: Final = frozenset({"and", "or", "not", "in", "true", "false", "null"})


class ExpressionError(ValueError):
    """A manifest expression could not be parsed or evaluated."""

    def __init__(self, message: str, position: int | None = None) -> None:
        self.message = message
        self.position = position
        where = "" if position is None else f" at column {position + 1}"
        super().__init__(f"{message}{where}")

    @property
    def column(self) -> int | None:
        return None if self.position is None else self.position + 1


class ExpressionSyntaxError(ExpressionError):
    """The text is not a valid expression (raised by `parse`)."""


class ExpressionEvalError(ExpressionError):
    """A valid expression failed on the given values (raised by `evaluate`)."""


# --- The syntax tree ------------------------------------------------------------------------------
# Nodes are frozen; `position` (offset of the token that made the node) and `depth` are excluded from
# equality so that parse(render(tree)) == tree.

UnaryOp: TypeAlias = Literal["-", "not"]
BinaryOp: TypeAlias = Literal[
    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"
]
ConstantValue: TypeAlias = bool | int | Decimal | str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Constant:
    value: ConstantValue
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(default=1, init=False, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Name:
    path: str  # dotted: "qty", "doc.customer", "lines.amount", "session.username"
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(default=1, init=False, compare=False, repr=False)
    parts: tuple[str, ...] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.path.split(".")))


@dataclasses.dataclass(frozen=True, slots=True)
class ListLiteral:
    items: tuple[Node, ...]
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max((item.depth for item in self.items), default=0))


@dataclasses.dataclass(frozen=True, slots=True)
class Unary:
    op: UnaryOp
    operand: Node
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + self.operand.depth)


@dataclasses.dataclass(frozen=True, slots=True)
class Binary:
    op: BinaryOp
    left: Node
    right: Node
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max(self.left.depth, self.right.depth))


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    function: str
    args: tuple[Node, ...]
    position: int = dataclasses.field(default=0, compare=False)
    depth: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max((arg.depth for arg in self.args), default=0))


Node: TypeAlias = Constant | Name | ListLiteral | Unary | Binary | Call


def iter_nodes(node: Node) -> Iterator[Node]:
    """Every node of the tree, parents before children (recursion is bounded by MAX_DEPTH)."""
    yield node
    children: tuple[Node, ...] = ()
    if isinstance(node, ListLiteral):
        children = node.items
    elif isinstance(node, Call):
        children = node.args
    elif isinstance(node, Unary):
        children = (node.operand,)
    elif isinstance(node, Binary):
        children = (node.left, node.right)
    for child in children:
        yield from iter_nodes(child)


@dataclasses.dataclass(frozen=True, slots=True)
class Expression:
    """A parsed expression: the source text and its tree. Parse once, evaluate many times."""

    source: str
    root: Node
    _references: frozenset[str] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = frozenset(node.path for node in iter_nodes(self.root) if isinstance(node, Name))
        object.__setattr__(self, "_references", names)

    def references(self) -> frozenset[str]:
        """The dotted field names the expression reads (function names are not included)."""
        return self._references

    def __str__(self) -> str:
        return self.source
