r"""A small, safe expression language for manifests: computed formulas, *_when rules and conditions.

The same text is used twice: the manifest validator parses it (`parse`) to reject bad syntax and to
check `Expression.references()` against the entity's fields, and the server evaluates it
(`evaluate`, `evaluate_condition`) on a record for `computed.formula`, `required_when`,
`readonly_when`, `visible_when`, `ActionUIHint.show_when`, `ApprovalStep.when` and action conditions.

Why not Python's eval: manifests are uploaded by tenants, and `eval` (even with empty builtins)
reaches attribute access, dunder escapes, huge exponentiation and unbounded recursion. Here the
grammar has no attribute access beyond data lookup, no imports, a fixed whitelist of functions, a
source length limit and a nesting limit; a hostile expression gets an `ExpressionError`, never a
`RecursionError` or a hung process.

This package's ``__init__`` is its one face: other packages import these names from
`dap.config.expressions` only; the work lives in small modules it re-exports: `trees` (limits,
errors, the syntax tree), `parsing` (tokenizer, parser, renderer), `values` (types, truth,
operators) and `evaluating` (the tree walk and the whitelisted functions).

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

from dap.config.expressions.evaluating import evaluate, evaluate_condition
from dap.config.expressions.parsing import parse, render
from dap.config.expressions.trees import (
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
