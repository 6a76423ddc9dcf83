"""Tests for the manifest expression language (dap.config.expressions)."""

from __future__ import annotations

import contextlib
import keyword
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dap.config import expressions as ex
from dap.config.expressions import Binary, Call, Constant, ListLiteral, Name, Node, Unary, trees

CONTEXT: dict[str, object] = {
    "qty": 3,
    "price": Decimal("2.50"),
    "rate": Decimal("0.1"),
    "name": "Acme",
    "active": True,
    "closed": False,
    "nothing": None,
    "doc": {"customer": "C-1", "total": 10, "address": {"city": "Oslo"}},
    "session": {"username": "alice", "roles": ["admin", "clerk"]},
    "lines": [
        {"item": "a", "amount": Decimal("1.25"), "qty": 2},
        {"item": "b", "amount": 3, "qty": None},
        {"item": "c", "amount": None},
    ],
    "empty": [],
    "start": date(2024, 2, 1),
    "end": date(2024, 3, 1),
    "stamp": datetime(2024, 3, 1, 12, 0, tzinfo=UTC),
    "ratio": 0.1,
}
TODAY = date(2025, 6, 30)
NOW = datetime(2025, 6, 30, 9, 30, tzinfo=UTC)


def run(source: str, context: dict[str, object] | None = None) -> object:
    return ex.evaluate(ex.parse(source), CONTEXT if context is None else context, today=TODAY, now=NOW)


def sexpr(node: Node) -> str:
    """A fully parenthesised prefix form, so tests can see how the parser grouped things."""
    if isinstance(node, Constant):
        return repr(node.value)
    if isinstance(node, Name):
        return node.path
    if isinstance(node, ListLiteral):
        return "[" + " ".join(sexpr(item) for item in node.items) + "]"
    if isinstance(node, Call):
        return f"({node.function} " + " ".join(sexpr(arg) for arg in node.args) + ")"
    if isinstance(node, Unary):
        return f"({node.op} {sexpr(node.operand)})"
    return f"({node.op} {sexpr(node.left)} {sexpr(node.right)})"


# --- Parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "value"),
    [
        pytest.param("42", 42, id="int"),
        pytest.param("007", 7, id="int-leading-zeros"),
        pytest.param("1.50", Decimal("1.50"), id="decimal-keeps-scale"),
        pytest.param("0.1", Decimal("0.1"), id="decimal-exact"),
        pytest.param("'single'", "single", id="single-quoted"),
        pytest.param('"double"', "double", id="double-quoted"),
        pytest.param(r"'a\'b\"c\\d'", "a'b\"c\\d", id="quote-escapes"),
        pytest.param(r'"tab\tnl\ncr\r"', "tab\tnl\ncr\r", id="whitespace-escapes"),
        pytest.param(r"'\u00e9t\u00E9'", "été", id="unicode-escape"),
        pytest.param("'é ✓'", "é ✓", id="raw-unicode"),
        pytest.param("''", "", id="empty-string"),
        pytest.param("true", True, id="true"),
        pytest.param("false", False, id="false"),
        pytest.param("null", None, id="null"),
    ],
)
def test_literals(source: str, value: object) -> None:
    root = ex.parse(source).root
    assert isinstance(root, Constant)
    assert type(root.value) is type(value)
    assert root.value == value
    if isinstance(value, Decimal):
        assert str(root.value) == str(value)


@pytest.mark.parametrize(
    ("source", "tree"),
    [
        pytest.param("1 + 2 * 3", "(+ 1 (* 2 3))", id="mul-over-add"),
        pytest.param("(1 + 2) * 3", "(* (+ 1 2) 3)", id="parentheses"),
        pytest.param("1 - 2 - 3", "(- (- 1 2) 3)", id="left-assoc-sub"),
        pytest.param("8 / 4 / 2", "(/ (/ 8 4) 2)", id="left-assoc-div"),
        pytest.param("a % b * c", "(* (% a b) c)", id="mod-same-level-as-mul"),
        pytest.param("-a * b", "(* (- a) b)", id="unary-minus-binds-tightest"),
        pytest.param("--a", "(- (- a))", id="double-minus"),
        pytest.param("a - -b", "(- a (- b))", id="minus-negative"),
        pytest.param("a + b == c * d", "(== (+ a b) (* c d))", id="arith-over-compare"),
        pytest.param("a == b and c != d", "(and (== a b) (!= c d))", id="compare-over-and"),
        pytest.param("a or b and c", "(or a (and b c))", id="and-over-or"),
        pytest.param("a and b or c and d", "(or (and a b) (and c d))", id="or-of-ands"),
        pytest.param("not a and b", "(and (not a) b)", id="not-over-and"),
        pytest.param("not a == b", "(not (== a b))", id="compare-over-not"),
        pytest.param("not not a", "(not (not a))", id="double-not"),
        pytest.param("a in [1, 2] or b", "(or (in a [1 2]) b)", id="in-is-comparison"),
        pytest.param("a not in [1]", "(not in a [1])", id="not-in"),
        pytest.param("x + 1 in [2, 3]", "(in (+ x 1) [2 3])", id="arith-over-in"),
        pytest.param("(a < b) == c", "(== (< a b) c)", id="parenthesised-compare-chains"),
        pytest.param("round(a * 2, 1)", "(round (* a 2) 1)", id="call-args"),
        pytest.param("if(a, b, c) + 1", "(+ (if a b c) 1)", id="call-is-primary"),
        pytest.param("sum(lines.amount)", "(sum lines.amount)", id="dotted-in-call"),
        pytest.param("today()", "(today )", id="no-args"),
        pytest.param("[]", "[]", id="empty-list"),
        pytest.param("[1, 'a', null,]", "[1 'a' None]", id="list-trailing-comma"),
        pytest.param("coalesce(a, b,)", "(coalesce a b)", id="call-trailing-comma"),
        pytest.param("count", "count", id="function-name-as-field"),
        pytest.param(" \t\n a \n", "a", id="whitespace"),
    ],
)
def test_precedence_and_grouping(source: str, tree: str) -> None:
    assert sexpr(ex.parse(source).root) == tree


@pytest.mark.parametrize(
    ("source", "rendered"),
    [
        pytest.param("(1+2)*3", "(1 + 2) * 3", id="keeps-needed-parens"),
        pytest.param("((a))", "a", id="drops-redundant-parens"),
        pytest.param("a - (b - c)", "a - (b - c)", id="right-assoc-needs-parens"),
        pytest.param("(not a) == b", "(not a) == b", id="not-under-compare"),
        pytest.param("a == (not b)", "a == (not b)", id="not-on-right"),
        pytest.param("-(a + b)", "-(a + b)", id="minus-of-sum"),
        pytest.param("'it\\'s'", "'it\\'s'", id="string-escape"),
        pytest.param('"a\\nb"', "'a\\nb'", id="canonical-quotes"),
        pytest.param("max(1,2.50,x)", "max(1, 2.50, x)", id="call"),
    ],
)
def test_render(source: str, rendered: str) -> None:
    assert ex.render(ex.parse(source)) == rendered
    assert ex.parse(rendered).root == ex.parse(source).root


def test_parse_is_cached_and_immutable() -> None:
    expr = ex.parse("qty * price")
    assert ex.parse("qty * price") is expr
    with pytest.raises(AttributeError):
        expr.root.op = "+"  # type: ignore[misc,union-attr]
    assert str(expr) == "qty * price"


# --- references() --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "names"),
    [
        pytest.param("1 + 2", set(), id="none"),
        pytest.param("qty * price", {"qty", "price"}, id="plain"),
        pytest.param("doc.customer == session.username", {"doc.customer", "session.username"}, id="dotted"),
        pytest.param("sum(lines.amount) + count(lines)", {"lines.amount", "lines"}, id="child-rows"),
        pytest.param("round(x) + today() - if(a, b, c)", {"x", "a", "b", "c"}, id="function-names-excluded"),
        pytest.param("a + a * a", {"a"}, id="deduplicated"),
        pytest.param("x in [y, 'z']", {"x", "y"}, id="list-items"),
        pytest.param("count + 1", {"count"}, id="field-named-like-a-function"),
    ],
)
def test_references(source: str, names: set[str]) -> None:
    assert ex.parse(source).references() == frozenset(names)


# --- Evaluation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("qty * price", Decimal("7.50"), id="int-times-decimal"),
        pytest.param("1 + 2", 3, id="int-add"),
        pytest.param("7 - 10", -3, id="int-sub"),
        pytest.param("0.1 + 0.2", Decimal("0.3"), id="decimal-exact-sum"),
        pytest.param("6 / 3", Decimal("2"), id="division-is-decimal"),
        pytest.param("1 / 4", Decimal("0.25"), id="division-exact"),
        pytest.param("7 % 3", 1, id="mod"),
        pytest.param("-7 % 3", 2, id="mod-python-sign"),
        pytest.param("7.5 % -2", Decimal("-0.5"), id="decimal-mod-python-sign"),
        pytest.param("-qty", -3, id="negate"),
        pytest.param("'a' + 'b'", "ab", id="string-concat"),
        pytest.param("qty > 2 and active", True, id="and"),
        pytest.param("closed or qty == 3", True, id="or"),
        pytest.param("not closed", True, id="not"),
        pytest.param("1 == 1.0", True, id="int-equals-decimal"),
        pytest.param("1 == true", False, id="bool-never-equals-number"),
        pytest.param("'1' == 1", False, id="mixed-types-unequal"),
        pytest.param("1 != 'a'", True, id="mixed-types-not-equal"),
        pytest.param("'abc' < 'abd'", True, id="string-order"),
        pytest.param("2 <= 2.0", True, id="le"),
        pytest.param("start < end", True, id="date-order"),
        pytest.param("[1, 2] == [1, 2.0]", True, id="list-equality"),
        pytest.param("qty in [1, 2, 3]", True, id="in-list"),
        pytest.param("qty not in [1, 2, 3]", False, id="not-in-list"),
        pytest.param("'cm' in name", True, id="substring"),
        pytest.param("'admin' in session.roles", True, id="in-context-list"),
        pytest.param("doc.customer", "C-1", id="dotted"),
        pytest.param("doc.address.city", "Oslo", id="deeply-dotted"),
        pytest.param("session.username", "alice", id="session"),
        pytest.param("lines.item", ["a", "b", "c"], id="projection"),
        pytest.param("sum(lines.amount)", Decimal("4.25"), id="sum-child-rows"),
        pytest.param("sum(lines.qty)", 2, id="sum-ints"),
        pytest.param("sum(empty.amount)", 0, id="sum-empty"),
        pytest.param("count(lines)", 3, id="count-rows"),
        pytest.param("count(lines.amount)", 2, id="count-non-null"),
        pytest.param("round(10 / 3, 2)", Decimal("3.33"), id="round"),
        pytest.param("round(2.5)", Decimal("3"), id="round-half-up"),
        pytest.param("round(-2.5)", Decimal("-3"), id="round-half-up-negative"),
        pytest.param("round(0.125, 2)", Decimal("0.13"), id="round-half-up-places"),
        pytest.param("round(1250, -2)", 1300, id="round-int-negative-places"),
        pytest.param("round(7)", 7, id="round-int"),
        pytest.param("abs(-2.5)", Decimal("2.5"), id="abs"),
        pytest.param("min(3, 1.5, 2)", Decimal("1.5"), id="min"),
        pytest.param("max(lines.amount)", 3, id="max-of-list"),
        pytest.param("min('b', 'a')", "a", id="min-strings"),
        pytest.param("len(name)", 4, id="len-string"),
        pytest.param("len(lines)", 3, id="len-list"),
        pytest.param("today()", TODAY, id="today"),
        pytest.param("now()", NOW, id="now"),
        pytest.param("today() - start", (TODAY - date(2024, 2, 1)).days, id="date-diff"),
        pytest.param("end - start", 29, id="date-minus-date-is-days"),
        pytest.param("start + 30", date(2024, 3, 2), id="date-plus-days"),
        pytest.param("30 + start", date(2024, 3, 2), id="days-plus-date"),
        pytest.param("end - 1", date(2024, 2, 29), id="date-minus-days"),
        pytest.param("stamp + 1", datetime(2024, 3, 2, 12, 0, tzinfo=UTC), id="datetime-plus-days"),
        pytest.param("coalesce(nothing, missing, 5, 6)", 5, id="coalesce"),
        pytest.param("if(qty > 2, 'big', 'small')", "big", id="if"),
        pytest.param("if(nothing, 'yes', 'no')", "no", id="if-null-is-false"),
        pytest.param("lower(name) + upper('x')", "acmeX", id="case"),
        pytest.param("concat(name, '-', qty, '-', price, nothing, active)", "Acme-3-2.50true", id="concat"),
        pytest.param("ratio + 0.2", Decimal("0.3"), id="float-context-becomes-decimal"),
        pytest.param("[qty, 'x']", [3, "x"], id="list-value"),
    ],
)
def test_evaluate(source: str, expected: object) -> None:
    result = run(source)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("missing", None, id="missing-name"),
        pytest.param("doc.missing.deeper", None, id="missing-dotted"),
        pytest.param("nothing.field", None, id="through-null"),
        pytest.param("missing + 1", None, id="add"),
        pytest.param("1 - missing", None, id="sub"),
        pytest.param("missing * 0", None, id="mul"),
        pytest.param("missing / 0", None, id="div-by-zero-of-null"),
        pytest.param("-missing", None, id="negate"),
        pytest.param("missing + 'a'", None, id="string-add"),
        pytest.param("missing == null", True, id="eq-null"),
        pytest.param("missing != null", False, id="ne-null"),
        pytest.param("qty == null", False, id="value-eq-null"),
        pytest.param("missing == 0", False, id="eq-value"),
        pytest.param("missing != 0", True, id="ne-value"),
        pytest.param("missing < 1", False, id="lt"),
        pytest.param("missing >= 1", False, id="ge"),
        pytest.param("1 > missing", False, id="gt-right"),
        pytest.param("not (missing < 1)", True, id="negated-comparison"),
        pytest.param("missing and true", False, id="and-null-is-false"),
        pytest.param("missing or true", True, id="or"),
        pytest.param("not missing", True, id="not-null"),
        pytest.param("missing in [1, null]", True, id="null-in-list-with-null"),
        pytest.param("missing in [1]", False, id="null-in-list"),
        pytest.param("missing not in [1]", True, id="null-not-in-list"),
        pytest.param("1 in missing", False, id="in-null"),
        pytest.param("round(missing, 2)", None, id="round"),
        pytest.param("round(1.5, missing)", None, id="round-places"),
        pytest.param("abs(missing)", None, id="abs"),
        pytest.param("len(missing)", None, id="len"),
        pytest.param("upper(missing)", None, id="upper"),
        pytest.param("sum(missing)", 0, id="sum-of-nothing"),
        pytest.param("count(missing)", 0, id="count-of-nothing"),
        pytest.param("min(missing, 2, nothing)", 2, id="min-skips-null"),
        pytest.param("max(missing)", None, id="max-all-null"),
        pytest.param("coalesce(missing)", None, id="coalesce-all-null"),
        pytest.param("concat(missing, 'a')", "a", id="concat-null-is-empty"),
    ],
)
def test_none_rules(source: str, expected: object) -> None:
    assert run(source) == expected


def test_short_circuit_skips_errors() -> None:
    assert run("closed and 1 / 0 == 1") is False
    assert run("active or 'a' - 1") is True
    assert run("if(active, 1, 1 / 0)") == 1
    assert run("coalesce(qty, 1 / 0)") == 3


def test_evaluate_accepts_text_and_any_mapping() -> None:
    assert ex.evaluate("a + 1", {"a": 1}) == 2
    assert ex.evaluate("a.b", {"a": {"b": (1, 2)}}) == [1, 2]


def test_clock_defaults() -> None:
    assert ex.evaluate("today()", {}) in (date.today(), date.today() + timedelta(days=1))
    assert abs(ex.evaluate("now()", {}) - datetime.now(UTC)) < timedelta(seconds=5)  # type: ignore[operator]
    assert ex.evaluate("today()", {}, now=NOW) == NOW.date()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("active", True, id="true"),
        pytest.param("closed", False, id="false"),
        pytest.param("missing", False, id="null-is-false"),
        pytest.param("qty > 1 and doc.customer != null", True, id="expression"),
    ],
)
def test_evaluate_condition(source: str, expected: bool) -> None:
    assert ex.evaluate_condition(source, CONTEXT) is expected


def test_evaluate_condition_rejects_non_boolean() -> None:
    with pytest.raises(ex.ExpressionEvalError, match="a condition expects true, false or null, got integer"):
        ex.evaluate_condition("qty", CONTEXT)


# --- Errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message", "column"),
    [
        pytest.param("", "empty expression", 1, id="empty"),
        pytest.param("a +", "unexpected end of the expression; expected a value", 4, id="dangling-operator"),
        pytest.param("1 +* 2", "unexpected '*'; expected a value", 4, id="double-operator"),
        pytest.param("a b", "unexpected 'b'; expected an operator or the end", 3, id="missing-operator"),
        pytest.param("'it''s'", "unexpected \"'s'\"; expected an operator", 5, id="adjacent-strings"),
        pytest.param("(a + b", "expected ')' to close '(' from column 1, found end", 7, id="unclosed-paren"),
        pytest.param("[1, 2", "expected ']' to close '[' from column 1", 6, id="unclosed-list"),
        pytest.param(
            "round(1 2)", "expected ')' to close '(' from column 6, found '2'", 9, id="missing-comma"
        ),
        pytest.param("a)", "unexpected ')'", 2, id="stray-paren"),
        pytest.param("'abc", "unterminated string", 1, id="unterminated-string"),
        pytest.param(r"'a\qb'", "invalid escape", 3, id="bad-escape"),
        pytest.param(r"'\u12'", "invalid escape", 2, id="short-unicode-escape"),
        pytest.param("1.", "expected digits after the decimal point", 3, id="trailing-dot"),
        pytest.param("1.2.3", "unexpected '.' after a number", 4, id="two-dots"),
        pytest.param("12abc", "unexpected 'a' after a number", 3, id="number-then-letters"),
        pytest.param("1e5", "unexpected 'e' after a number", 2, id="no-exponents"),
        pytest.param("a.", "expected a field name after '.'", 3, id="dangling-dot"),
        pytest.param("a. b", "expected a field name after '.'", 3, id="space-after-dot"),
        pytest.param("a.1", "expected a field name after '.'", 3, id="digit-after-dot"),
        pytest.param("a = 1", "'=' is not an operator; use '=='", 3, id="single-equals"),
        pytest.param("a && b", "use 'and'", 3, id="c-and"),
        pytest.param("a || b", "use 'or'", 3, id="c-or"),
        pytest.param("!a", "use 'not'", 1, id="bang"),
        pytest.param("a ** 2", "unexpected '*'", 4, id="no-power"),
        pytest.param("a # b", "unexpected character '#'", 3, id="bad-char"),
        pytest.param("a < b < c", "comparisons cannot be chained", 7, id="chained-compare"),
        pytest.param("a == b != c", "comparisons cannot be chained", 8, id="chained-equality"),
        pytest.param("a not b", "expected 'in' after 'not', found 'b'", 7, id="not-without-in"),
        pytest.param("a == not b", "'not' must be put in parentheses", 6, id="not-after-compare"),
        pytest.param("-not a", "'not' must be put in parentheses", 2, id="minus-not"),
        pytest.param("and", "unexpected 'and'", 1, id="keyword-as-value"),
        pytest.param("round()", "round() takes 1 to 2 argument(s), got 0", 1, id="too-few-args"),
        pytest.param("if(a, b)", "if() takes 3 argument(s), got 2", 1, id="if-arity"),
        pytest.param("today(1)", "today() takes 0 argument(s), got 1", 1, id="today-arity"),
        pytest.param("coalesce()", "coalesce() takes at least 1 argument(s)", 1, id="variadic-arity"),
    ],
)
def test_syntax_errors(source: str, message: str, column: int) -> None:
    with pytest.raises(ex.ExpressionSyntaxError) as caught:
        ex.parse(source)
    assert message in caught.value.message
    assert caught.value.column == column
    assert str(caught.value).endswith(f"at column {column}")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("eval('1')", id="eval"),
        pytest.param("__import__('os')", id="import"),
        pytest.param("exec('x')", id="exec"),
        pytest.param("open('/etc/passwd')", id="open"),
        pytest.param("getattr(a, 'b')", id="getattr"),
        pytest.param("doc.upper('x')", id="dotted-call"),
        pytest.param("Round(1)", id="case-sensitive"),
        pytest.param("sqrt(4)", id="unlisted-math"),
    ],
)
def test_unknown_functions_are_rejected(source: str) -> None:
    with pytest.raises(ex.ExpressionSyntaxError, match="unknown function") as caught:
        ex.parse(source)
    assert caught.value.column == 1
    assert "expected one of abs, coalesce" in caught.value.message


def test_whitelist_is_pinned() -> None:
    assert set(ex.FUNCTIONS) == {
        "abs", "coalesce", "concat", "count", "if", "len", "lower",
        "max", "min", "now", "round", "sum", "today", "upper",
    }  # fmt: skip


def test_no_attribute_access_escapes() -> None:
    # Dotted names only read mapping keys; they never reach Python attributes.
    assert run("doc.__class__") is None
    assert run("x.__class__.__bases__", {"x": {}}) is None
    with pytest.raises(ex.ExpressionEvalError, match="cannot read '__class__' of 'name'"):
        run("name.__class__")


@pytest.mark.parametrize(
    ("source", "context", "message", "column"),
    [
        pytest.param("'a' - 1", {}, "cannot apply '-' to string and integer", 5, id="string-minus-int"),
        pytest.param("a * b", {"a": "x", "b": 2}, "cannot apply '*' to string and integer", 3, id="names"),
        pytest.param("true + 1", {}, "cannot apply '+' to boolean and integer", 6, id="bool-is-not-number"),
        pytest.param("1 / 0", {}, "division by zero in '/'", 3, id="div-zero"),
        pytest.param("1.5 / (a - a)", {"a": 2}, "division by zero in '/'", 5, id="div-zero-decimal"),
        pytest.param("5 % 0", {}, "division by zero in '%'", 3, id="mod-zero"),
        pytest.param("'a' < 1", {}, "cannot compare with '<': string and integer", 5, id="compare-types"),
        pytest.param("d >= 1", {"d": date(2024, 1, 1)}, "'>=': date and integer", 3, id="date-vs-int"),
        pytest.param("true < false", {}, "boolean and boolean", 6, id="booleans-unordered"),
        pytest.param(
            "a < b",
            {"a": datetime(2024, 1, 1), "b": datetime(2024, 1, 1, tzinfo=UTC)},
            "datetime and datetime",
            3,
            id="naive-vs-aware",
        ),
        pytest.param(
            "d - 1.5", {"d": date(2024, 1, 1)}, "cannot apply '-' to date and decimal", 3, id="frac-days"
        ),
        pytest.param("-'a'", {}, "cannot negate string", 1, id="negate-string"),
        pytest.param("1 and true", {}, "'and' expects true, false or null, got integer", 3, id="and-int"),
        pytest.param("not 'x'", {}, "'not' expects true, false or null, got string", 1, id="not-string"),
        pytest.param("if(1, 2, 3)", {}, "if() expects true, false or null, got integer", 1, id="if-int"),
        pytest.param("1 in 2", {}, "'in' needs a list or a string on the right", 3, id="in-int"),
        pytest.param("1 in 'abc'", {}, "'in' needs a list or a string on the right", 3, id="int-in-string"),
        pytest.param("sum(a)", {"a": 5}, "sum() expects a list", 1, id="sum-scalar"),
        pytest.param("sum(['a'])", {}, "sum() expects numbers, got string", 1, id="sum-strings"),
        pytest.param("count(a)", {"a": 1}, "count() expects a list", 1, id="count-scalar"),
        pytest.param("round('a')", {}, "round() expects a number, got string", 1, id="round-string"),
        pytest.param("round(1.5, 0.5)", {}, "round() expects a whole number of places", 1, id="round-places"),
        pytest.param(
            "round(1.5, 99)", {}, "round() expects a whole number of places", 1, id="round-too-many"
        ),
        pytest.param("abs('a')", {}, "abs() expects a number", 1, id="abs-string"),
        pytest.param("len(1)", {}, "len() expects a string or a list", 1, id="len-int"),
        pytest.param("upper(1)", {}, "upper() expects a string", 1, id="upper-int"),
        pytest.param("max(1, 'a')", {}, "cannot compare with 'max()': integer and string", 1, id="max-mixed"),
        pytest.param("min(true)", {}, "boolean and boolean", 1, id="min-bool"),
        pytest.param("concat(a)", {"a": {"x": 1}}, "concat() cannot turn into text a record", 1, id="concat"),
        pytest.param("a.b", {"a": 5}, "cannot read 'b' of 'a' integer", 1, id="field-of-scalar"),
        pytest.param("a + 1", {"a": float("nan")}, "'a' holds a non-finite number", 1, id="nan"),
        pytest.param("d + 9999999", {"d": date(2024, 1, 1)}, "date out of range", 3, id="date-overflow"),
    ],
)
def test_evaluation_errors(source: str, context: dict[str, object], message: str, column: int) -> None:
    with pytest.raises(ex.ExpressionEvalError) as caught:
        ex.evaluate(source, context)
    assert message in str(caught.value)
    assert caught.value.column == column


def test_error_tree() -> None:
    assert issubclass(ex.ExpressionSyntaxError, ex.ExpressionError)
    assert issubclass(ex.ExpressionEvalError, ex.ExpressionError)
    assert issubclass(ex.ExpressionError, ValueError)  # pydantic validators may raise it as is
    error = ex.ExpressionError("boom")
    assert (str(error), error.position, error.column) == ("boom", None, None)


# --- Limits --------------------------------------------------------------------------------------


def test_source_length_limit() -> None:
    ex.parse("1" + " " * (ex.MAX_SOURCE_LENGTH - 1))
    with pytest.raises(ex.ExpressionSyntaxError, match="the limit is 2000"):
        ex.parse("1" + " " * ex.MAX_SOURCE_LENGTH)


@pytest.mark.parametrize(
    ("build", "ok_at"),
    [
        pytest.param(lambda n: "(" * n + "1" + ")" * n, ex.MAX_DEPTH, id="parentheses"),
        pytest.param(lambda n: "[" * n + "]" * n, ex.MAX_DEPTH, id="lists"),
        pytest.param(lambda n: "abs(" * n + "1" + ")" * n, ex.MAX_DEPTH - 1, id="calls"),
        pytest.param(lambda n: "-" * n + "1", ex.MAX_DEPTH - 1, id="unary-minus"),
        pytest.param(lambda n: "not " * n + "true", ex.MAX_DEPTH - 1, id="not"),
        pytest.param(lambda n: "+".join(["1"] * (n + 1)), ex.MAX_DEPTH - 1, id="long-sum"),
        pytest.param(lambda n: " or ".join(["a"] * (n + 1)), ex.MAX_DEPTH - 1, id="long-or"),
    ],
)
def test_nesting_limit(build: object, ok_at: int) -> None:
    assert callable(build)
    ex.evaluate(ex.parse(build(ok_at)), {})
    with pytest.raises(ex.ExpressionSyntaxError, match="nested too deeply"):
        ex.parse(build(ok_at + 1))


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("(" * 1999, id="parens"),
        pytest.param("-" * 1999 + "1", id="minus"),
        pytest.param("+".join(["1"] * 1000), id="sum"),
        pytest.param("not " * 499 + "a", id="not"),
        pytest.param("[" * 1000, id="brackets"),
    ],
)
def test_hostile_input_never_overflows_the_stack(source: str) -> None:
    with pytest.raises(ex.ExpressionSyntaxError):
        ex.parse(source)


def test_public_names() -> None:
    assert set(ex.__all__) == {
        "FUNCTIONS", "MAX_DEPTH", "MAX_SOURCE_LENGTH", "Binary", "Call", "Constant", "Expression",
        "ExpressionError", "ExpressionEvalError", "ExpressionSyntaxError", "ListLiteral", "Name",
        "Node", "Unary", "evaluate", "evaluate_condition", "iter_nodes", "parse", "render",
    }  # fmt: skip


# --- Properties ----------------------------------------------------------------------------------

_ident = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda word: word not in trees.KEYWORDS and not keyword.iskeyword(word)
)
_names = st.lists(_ident, min_size=1, max_size=3).map(lambda parts: Name(".".join(parts)))
_constants = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=0, max_value=10**30),
    st.decimals(min_value=0, max_value=10**12, places=3),
    st.text(max_size=8),
).map(Constant)


def _max_args(function: str) -> int:
    high = ex.FUNCTIONS[function][1]
    return 3 if high is None else high


def _compound(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    binary_ops = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
    calls = st.sampled_from(sorted(ex.FUNCTIONS)).flatmap(
        lambda name: st.lists(children, min_size=ex.FUNCTIONS[name][0], max_size=_max_args(name)).map(
            lambda args: Call(name, tuple(args))
        )
    )
    return st.one_of(
        st.builds(Unary, st.sampled_from(["-", "not"]), children),
        st.builds(Binary, st.sampled_from(binary_ops), children, children),
        st.lists(children, max_size=3).map(lambda items: ListLiteral(tuple(items))),
        calls,
    )


_trees = st.recursive(st.one_of(_constants, _names), _compound, max_leaves=12)


@given(_trees)
@settings(max_examples=300)
def test_render_round_trips(tree: Node) -> None:
    text = ex.render(tree)
    reparsed = ex.parse(text)
    assert reparsed.root == tree
    assert ex.render(reparsed) == text


@st.composite
def _int_arithmetic(draw: st.DrawFn, depth: int = 0) -> tuple[str, int]:
    """Source text of a random + - * % expression over ints, and its value computed by Python."""
    if depth > 4 or draw(st.booleans()):
        value = draw(st.integers(min_value=-(10**20), max_value=10**20))
        return (str(value) if value >= 0 else f"({value})"), value
    op = draw(st.sampled_from(["+", "-", "*", "%", "neg"]))
    left_text, left = draw(_int_arithmetic(depth + 1))
    if op == "neg":
        return f"-({left_text})", -left
    right_text, right = draw(_int_arithmetic(depth + 1))
    if op == "%" and right == 0:
        right_text, right = "7", 7
    value = {"+": left + right, "-": left - right, "*": left * right, "%": left % right if right else 0}[op]
    return f"({left_text} {op} {right_text})", value


@given(_int_arithmetic())
def test_int_arithmetic_matches_python(case: tuple[str, int]) -> None:
    text, expected = case
    result = ex.evaluate(text, {})
    assert result == expected
    assert type(result) is int


@given(
    st.decimals(min_value=-(10**9), max_value=10**9, places=4),
    st.decimals(min_value=-(10**9), max_value=10**9, places=4),
    st.integers(min_value=-(10**6), max_value=10**6),
)
def test_decimal_arithmetic_is_exact(a: Decimal, b: Decimal, n: int) -> None:
    context = {"a": a, "b": b, "n": n}
    assert ex.evaluate("a + b * n - b", context) == a + b * n - b
    assert ex.evaluate("a * b", context) == a * b
    if b:
        quotient = ex.evaluate("a / b", context)
        assert isinstance(quotient, Decimal)
        assert abs(quotient * b - a) <= Decimal("1e-20") * max(abs(a), 1)
        remainder = ex.evaluate("a % b", context)
        assert isinstance(remainder, Decimal)
        assert abs(remainder) < abs(b)
        assert remainder == 0 or (remainder < 0) == (b < 0)  # Python's sign rule
        assert ((a - remainder) / b) % 1 == 0


@given(st.text(max_size=60))
@settings(max_examples=500)
def test_arbitrary_text_parses_or_raises_syntax_error(text: str) -> None:
    position: int | None = -1
    try:
        expression = ex.parse(text)
    except ex.ExpressionSyntaxError as error:
        position = error.position
    else:
        with contextlib.suppress(ex.ExpressionEvalError):
            ex.evaluate(expression, {}, today=TODAY, now=NOW)
    assert position is not None
    assert -1 <= position <= len(text)


@given(_trees)
@settings(max_examples=300)
def test_random_trees_evaluate_or_raise_eval_error(tree: Node) -> None:
    with contextlib.suppress(ex.ExpressionEvalError):
        ex.evaluate(ex.parse(ex.render(tree)), CONTEXT, today=TODAY, now=NOW)
