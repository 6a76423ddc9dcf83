"""The shape of the code base: no import circles, one face per server subpackage, small modules.

import-linter's contracts (pyproject.toml, run by ``make lint``) state the layers; these tests
state what a layers contract cannot: that no two modules anywhere in ``dap`` import each other
through any chain (imports under ``TYPE_CHECKING`` included), and that a subpackage of
``dap.server`` is reached from outside only through the names its ``__init__`` publishes.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import grimp
import pytest

import dap

ROOT = Path(dap.__file__).parent
SUBPACKAGES = ("storage", "catalog", "access", "documents", "workflows", "web", "rpc")


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


# --- dap.control by concern (issue 42) -------------------------------------------------------------

CONTROL = ROOT / "control"
# the only modules directly in dap/control: its face and what every concern shares
CONTROL_LOOSE = {"__init__.py", "errors.py", "ids.py"}
# every concern package of dap.control and the names its face publishes (this changes when they do)
CONTROL_FACES = {
    "cli": ["commands"],
    "serving": [
        "app",
        "fleets",
        "handlers",
        "http",
        "placements",
        "proofs",
        "reports",
        "settings",
        "syncing",
    ],
    "artifacts": ["packing", "registration", "validation"],
    "kube": ["bindings", "leases", "member", "placing", "region"],
    "supply": ["contents", "freezes", "freezing", "monitoring", "policies", "promotions", "transparency"],
    "evidence": ["models", "storing"],
    "clusters": ["caches", "live", "registry", "routing"],
    "storage": ["schema", "store"],
    "trust": ["envelopes", "signing", "snapshots"],
}


def _outside_concerns(package: Path, loose: set[str], concerns: set[str]) -> list[str]:
    """Modules directly in ``package`` beyond ``loose``, and folders that are no known concern."""
    stray = [p.name for p in sorted(package.glob("*.py")) if p.name not in loose]
    folders = [
        p.name
        for p in sorted(package.iterdir())
        if p.is_dir() and p.name != "__pycache__" and p.name not in concerns
    ]
    return stray + [f"{name}/" for name in folders]


def test_every_control_module_sits_in_its_concern_package() -> None:
    assert _outside_concerns(CONTROL, CONTROL_LOOSE, set(CONTROL_FACES)) == []


def test_the_concern_check_finds_a_loose_module_and_an_unknown_folder(tmp_path: Path) -> None:
    for name in ("__init__.py", "errors.py", "tlog_store.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "supply").mkdir()
    (tmp_path / "misc").mkdir()
    assert _outside_concerns(tmp_path, CONTROL_LOOSE, {"supply"}) == ["tlog_store.py", "misc/"]


@pytest.mark.parametrize("name", sorted(CONTROL_FACES))
def test_a_control_package_publishes_its_pinned_names(name: str) -> None:
    package = importlib.import_module(f"dap.control.{name}")
    assert (package.__doc__ or "").strip()
    assert sorted(package.__all__) == CONTROL_FACES[name]
    for published in package.__all__:
        assert (CONTROL / name / f"{published}.py").exists()
    assert {p.stem for p in (CONTROL / name).glob("*.py")} - {"__init__"} >= set(package.__all__)


@pytest.mark.parametrize("name", sorted(CONTROL_FACES))
def test_a_control_package_is_reached_only_through_its_face(graph: grimp.ImportGraph, name: str) -> None:
    package = f"dap.control.{name}"
    published = set(CONTROL_FACES[name])
    wrong = []
    for module in sorted(graph.find_children(package)):
        if module.removeprefix(f"{package}.") in published:
            continue
        for importer in sorted(graph.find_modules_that_directly_import(module)):
            if not importer.startswith(f"{package}."):
                wrong.append(f"{importer} imports {module}, which {package} does not publish")
    assert wrong == []
