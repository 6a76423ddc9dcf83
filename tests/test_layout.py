"""The shape of the code base: no import circles, one face per server subpackage, small modules.

import-linter's contracts (pyproject.toml, run by ``make lint``) state the layers; these tests
state what a layers contract cannot: that no two modules anywhere in ``dap`` import each other
through any chain (imports under ``TYPE_CHECKING`` included), and that a subpackage of
``dap.server`` is reached from outside only through the names its ``__init__`` publishes.
"""

from __future__ import annotations

import ast
import importlib
import posixpath
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


# --- the resource pod is only the pod (issue 42) ---------------------------------------------------

POD = "dap.resource_pod"
# Every module of the pod, by the part of the pod's job it does: pull, verify, load, swap, report,
# and running the pod (its boot, settings, command, wire types and errors). A new module is placed
# here on purpose, or it fails; dev mode, tokens to try a server and anything else that assembles
# or drives a pod from outside belongs above it (``dap.dev``), not in this table.
POD_JOBS: dict[str, tuple[str, ...]] = {
    "pull": ("pulling", "fetching", "backoff", "timing"),
    "verify": ("verifying", "logproof", "logkeeping"),
    "load": ("loading", "persisting"),
    "swap": ("converging",),
    "report": ("reporting", "evidence", "pullmetrics"),
    "run the pod": ("hosting", "settings", "cli", "documents", "errors"),
}
POD_ENTRIES = (POD, f"{POD}.cli")  # the face, and ``dap pod``


def _outside_the_pods_job(graph: grimp.ImportGraph) -> list[str]:
    """Modules of the pod that are not its job, each with the reason. The rule, precisely:

    1. a module's name is in ``POD_JOBS`` (placed under one of the pod's jobs);
    2. no module is dev mode: none is named ``dev…`` (``dap dev`` is ``dap.dev``);
    3. every module is reached from the pod's entries (its face, ``dap pod``) through the pod's own
       imports: a module that only code outside the pod uses does another package's job.
    """
    placed = {name for names in POD_JOBS.values() for name in names}
    modules = {m for m in graph.find_descendants(POD) if m.count(".") == POD.count(".") + 1}
    reached: set[str] = set()
    todo = [m for m in POD_ENTRIES if m in graph.modules]
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo.extend(m for m in graph.find_modules_directly_imported_by(module) if m.startswith(f"{POD}."))
    wrong = []
    for module in sorted(modules):
        name = module.rsplit(".", 1)[1]
        if name.startswith("dev"):
            wrong.append(f"{module} is dev mode: it belongs in dap.dev")
        elif name not in placed:
            wrong.append(f"{module} is not placed under a job of the pod (pull, verify, load, swap, report)")
        elif module not in reached:
            wrong.append(f"{module} is used by nothing of the pod: it does the job of what uses it")
    return wrong


def test_the_resource_pod_holds_only_the_pods_job(graph: grimp.ImportGraph) -> None:
    assert _outside_the_pods_job(graph) == []


def test_the_pod_rule_finds_dev_mode_and_strays() -> None:
    fake = grimp.ImportGraph()
    for name in ("", ".cli", ".pulling", ".hosting", ".devseed", ".tokens", ".reporting"):
        fake.add_module(f"{POD}{name}")
    fake.add_import(importer=POD, imported=f"{POD}.hosting")
    fake.add_import(importer=f"{POD}.hosting", imported=f"{POD}.pulling")
    fake.add_import(importer=f"{POD}.cli", imported=f"{POD}.devseed")
    fake.add_module("dap.dev.running")
    fake.add_import(importer="dap.dev.running", imported=f"{POD}.reporting")  # only dev uses it
    assert _outside_the_pods_job(fake) == [
        f"{POD}.devseed is dev mode: it belongs in dap.dev",
        f"{POD}.reporting is used by nothing of the pod: it does the job of what uses it",
        f"{POD}.tokens is not placed under a job of the pod (pull, verify, load, swap, report)",
    ]


def test_dev_mode_uses_the_pod_the_control_plane_and_the_server_through_their_faces(
    graph: grimp.ImportGraph,
) -> None:
    """A module of ``dap.dev`` imports a package of theirs (its face), or a name that the
    package's ``__init__`` publishes in ``__all__``; never a module the face keeps to itself."""
    wrong = []
    for importer in sorted(graph.find_descendants("dap.dev")):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if not imported.startswith(("dap.resource_pod", "dap.server", "dap.control")):
                continue
            parent, _, name = imported.rpartition(".")
            if (ROOT.parent / imported.replace(".", "/") / "__init__.py").exists():
                continue  # a package: its face
            if name in importlib.import_module(parent).__all__:
                continue
            wrong.append(f"{importer} imports {imported}, which {parent} does not publish")
    assert wrong == []


# --- no import circle in the UI's TypeScript either ------------------------------------------------

UI_SRC = ROOT.parent / "ui" / "src"
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
_SPECIFIERS = (
    # import … from "x", import type … from "x", export … from "x" (over several lines too)
    re.compile(r"""^\s*(?:import|export)\b[^"';]*?\bfrom\s*["']([^"']+)["']""", re.MULTILINE),
    re.compile(r"""^\s*import\s*["']([^"']+)["']""", re.MULTILINE),  # import "x" (side effects)
    re.compile(r"""\bimport\(\s*["']([^"']+)["']\s*\)"""),  # import("x")
)


def ts_imports(source: str) -> list[str]:
    """The module specifiers a TypeScript file imports or re-exports (type-only ones included:
    they tie two modules as a ``TYPE_CHECKING`` import does in Python)."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", source))
    return sorted({m for pattern in _SPECIFIERS for m in pattern.findall(text)})


def ts_graph(src: Path) -> grimp.ImportGraph:
    """The relative imports between the ``.ts`` modules under ``src``, as a grimp graph (names are
    paths without the extension), so that ``_circles`` finds their circles."""
    graph = grimp.ImportGraph()
    files = {path.relative_to(src).with_suffix("").as_posix(): path for path in sorted(src.rglob("*.ts"))}
    for name in files:
        graph.add_module(name)
    for name, path in files.items():
        for spec in ts_imports(path.read_text()):
            if not spec.startswith("."):
                continue  # a package (preact, htm)
            candidate = posixpath.normpath(posixpath.join(posixpath.dirname(name), spec))
            for option in (candidate, f"{candidate}/index"):
                if option in files:
                    graph.add_import(importer=name, imported=option)
                    break
    return graph


def test_no_import_circle_in_the_ui() -> None:
    graph = ts_graph(UI_SRC)
    assert len(graph.modules) > 20, "the UI's modules were found"
    assert _circles(graph) == []


def test_the_ui_circle_finder_finds_a_circle(tmp_path: Path) -> None:
    (tmp_path / "views").mkdir()
    (tmp_path / "expr").mkdir()
    (tmp_path / "meta.ts").write_text('import type { Decl } from "./contexts";\nexport type A = Decl;\n')
    (tmp_path / "contexts.ts").write_text(
        '// import { nothing } from "./views/page";\n'
        "import {\n  type A,\n} from './meta';\n"
        'import { evaluate } from "./expr";\nexport type Decl = { a: A };\n'
    )
    (tmp_path / "expr" / "index.ts").write_text('export { evaluate } from "./evaluate";\n')
    (tmp_path / "expr" / "evaluate.ts").write_text("export const evaluate = 1;\n")
    (tmp_path / "views" / "page.ts").write_text(
        'import { html } from "htm";\nimport "../meta";\nconst later = () => import("./form");\n'
    )
    (tmp_path / "views" / "form.ts").write_text('import { later } from "../views/page";\n')
    graph = ts_graph(tmp_path)
    assert sorted(graph.find_modules_directly_imported_by("contexts")) == ["expr/index", "meta"]
    assert _circles(graph) == [["contexts", "meta"], ["views/form", "views/page"]]


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
        "traced",
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
