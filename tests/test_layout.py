"""The shape of the code base: no import circles, one face per server subpackage, small modules.

import-linter's contracts (pyproject.toml, run by ``make lint``) state the layers; these tests
state what a layers contract cannot: that no two modules anywhere in ``dap`` import each other
through any chain (imports under ``TYPE_CHECKING`` included), and that a subpackage of
``dap.server`` is reached from outside only through the names its ``__init__`` publishes.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import grimp
import pytest

import dap

ROOT = Path(dap.__file__).parent
SUBPACKAGES = ("storage", "fieldvalues", "catalog", "access", "documents", "workflows", "web", "rpc")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("dap", cache_dir=None)


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circle_anywhere(graph: grimp.ImportGraph) -> None:
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    fake = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        fake.add_module(name)
    fake.add_import(importer="p.a", imported="p.b")
    fake.add_import(importer="p.b", imported="p.a")
    fake.add_import(importer="p.c", imported="p.a")
    assert _circles(fake) == [["p.a", "p.b"]]


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_a_subpackage_is_reached_only_through_its_face(graph: grimp.ImportGraph, name: str) -> None:
    package = f"dap.server.{name}"
    published = set(importlib.import_module(package).__all__)
    wrong = []
    for module in sorted(graph.find_children(package)):
        inner = module.removeprefix(f"{package}.")
        if inner in published:
            continue
        for importer in sorted(graph.find_modules_that_directly_import(module)):
            if importer != package and not importer.startswith(f"{package}."):
                wrong.append(f"{importer} imports {module}, which {package} does not publish")
    assert wrong == []


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_face_has_a_docstring_and_publishes_what_exists(name: str) -> None:
    package = importlib.import_module(f"dap.server.{name}")
    assert (package.__doc__ or "").strip()
    for published in package.__all__:
        assert (ROOT / "server" / name / f"{published}.py").exists() or hasattr(package, published)


MAX_LINES = 500


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT.parent)): n
        for path in sorted(ROOT.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_python_pattern_is_anchored_with_a_dollar() -> None:
    """``$`` also matches before a final newline ("acme\\n" passed a slug check): names are checked
    with ``fullmatch`` on unanchored patterns instead."""
    anchored = re.compile(r"""re\.(?:compile|match|search)\(\s*r?["'][^"']*\$["']""")
    found = [
        f"{path.relative_to(ROOT.parent)}:{n}"
        for path in sorted(ROOT.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if anchored.search(line)
    ]
    assert found == []


# --- value conversion has one home: dap.server.fieldvalues -----------------------------------
# What converts a field's value, whichever module it stands in: making a Decimal (an exact
# number from text, a float, a JSON number), reading ISO 8601 or formatted dates and times
# (``fromisoformat``, ``strptime``), and JSON decoding that turns numbers into something else
# (``parse_float``/``parse_constant``). Scanned in ``dap/server`` and ``dap/bridge``, the code that
# takes field values in and out; ``dap.config``'s expression language computes with Decimals by
# its own rules and hands results to ``fieldvalues.convert``. Not scanned for: ``uuid.UUID(...)``
# (record, job, tenant and cache ids parsed from paths and keys are the platform's identifiers,
# not field values; a field's uuid goes through ``fieldvalues.uuid_of`` via ``coerce``),
# ``int()``/``float()`` (query limits, ports, TTLs, counters: too common to tell apart) and
# ``.isoformat()`` (timestamps of events and logs). Allowed elsewhere: nothing, today; a new
# exception names its module and why here.
CONVERTING_CALLS = frozenset({"Decimal", "fromisoformat", "strptime"})
CONVERTING_KEYWORDS = frozenset({"parse_float", "parse_constant"})
VALUE_MODEL = ROOT / "server" / "fieldvalues"
CONVERSION_ALLOWED: dict[str, str] = {}


def _conversions(source: str) -> list[tuple[int, str]]:
    """The lines of ``source`` that convert a value, and what each calls."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in CONVERTING_CALLS:
            found.append((node.lineno, f"{name}(...)"))
        found.extend((node.lineno, f"{k.arg}=") for k in node.keywords if k.arg in CONVERTING_KEYWORDS)
    return found


def test_the_conversion_finder_finds_conversions() -> None:
    source = (
        "import datetime as dt, json\n"
        "from decimal import Decimal\n"
        "a = Decimal(text)\n"
        "b = dt.date.fromisoformat(text)\n"
        "c = json.loads(text, parse_float=Decimal)\n"
        "d = decimal.Decimal(1)\n"
        "e = dt.datetime.strptime(text, '%Y')\n"
        "f = isinstance(x, Decimal)\n"
    )
    assert _conversions(source) == [
        (3, "Decimal(...)"),
        (4, "fromisoformat(...)"),
        (5, "parse_float="),
        (6, "Decimal(...)"),
        (7, "strptime(...)"),
    ]


def test_no_value_is_converted_outside_the_value_model() -> None:
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {what}"
        for package in (ROOT / "server", ROOT / "bridge")
        for path in sorted(package.rglob("*.py"))
        if VALUE_MODEL not in path.parents and str(path.relative_to(ROOT.parent)) not in CONVERSION_ALLOWED
        for line, what in _conversions(path.read_text())
    ]
    assert found == [], "convert field values in dap.server.fieldvalues (or allow the module, saying why)"
