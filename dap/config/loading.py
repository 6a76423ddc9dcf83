"""Read manifest files into a validated ``Spec``.

The pipeline per document is: strict YAML → JSON Schema of its kind (draft-07, the same schema
``dap schema`` prints) → pydantic model → cross-document rules (``validation``). Every stage
collects problems instead of stopping at the first, so one run reports everything wrong with a
spec. Schema messages are rewritten to say what to do, since jsonschema's wording
("Additional properties are not allowed") is written for schema authors, not manifest authors.
"""

from __future__ import annotations

import contextlib
import difflib
import gc
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import fastjsonschema
import pydantic
import yaml

from dap.config import manifests, schema, validation, yamls
from dap.config.errors import Problem, SpecError, json_path
from dap.config.specs import Origin, Spec, Unbuilt

if TYPE_CHECKING:  # jsonschema is imported only to explain a document that fails its schema
    from jsonschema.exceptions import ValidationError as SchemaError

MANIFEST_SUFFIXES = (".yaml", ".yml")
# seed records (``dap seed``, ``dap dev``) live beside the manifests and are not manifests
SEED_DIR = "seed/"
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def load_spec(root: Path) -> Spec:
    """Load every ``.yaml``/``.yml`` file below ``root`` (recursively) into a validated ``Spec``."""
    return load_files(read_files(root))


def read_files(root: Path) -> dict[str, bytes]:
    """The manifest files below ``root``, path relative to it → content."""
    if not root.is_dir():
        raise SpecError(
            [Problem(str(root), None, "", "not a directory; give the folder holding the manifests")]
        )
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.suffix in MANIFEST_SUFFIXES and path.is_file() and not relative.startswith(SEED_DIR):
            files[relative] = path.read_bytes()
    return files


def load_files(files: Mapping[str, bytes | str]) -> Spec:
    """Load manifests from memory (path → content); non-YAML paths are ignored."""
    with _gc_paused():
        return _load_files(files)


@dataclass(frozen=True)
class StagedSpec:
    """A spec whose documents are built and cross-checked, with the JSON Schema pass still to run.

    The pass costs little per document but compiling the validators costs ~0.3 s once per
    process, which a boot can spend while Postgres creates the tables (on another core) instead
    of before: the server applies the schema in a transaction and commits only after
    ``confirm()`` returned. The result is the same spec ``load_files`` builds: a document that
    fails its schema makes ``confirm`` raise the very ``SpecError`` ``load_files`` raises.
    """

    spec: Spec
    files: Mapping[str, bytes | str]
    documents: tuple[tuple[str, Any], ...]  # (kind, parsed document), every document of the spec

    def confirm(self) -> None:
        """Run the JSON Schema pass; raise ``SpecError`` (every problem) when a document fails it."""
        try:
            for kind, document in self.documents:
                schema.fast_validator_for(kind)(document)
        except fastjsonschema.JsonSchemaException:
            load_files(self.files)  # lists every problem, as a plain load would
            raise  # pragma: no cover -- load_files reports any document the fast validator refuses


def stage_files(files: Mapping[str, bytes | str]) -> StagedSpec:
    """Build a spec like ``load_files`` but leave the JSON Schema pass to ``StagedSpec.confirm``.

    Any problem found while staging is reported exactly as ``load_files`` reports it (the plain
    load runs again to list the problems in schema terms), so only a valid-looking spec stages.
    """
    documents: list[tuple[str, Any]] = []
    try:
        with _gc_paused():
            spec = _load_files(files, staged=documents)
    except SpecError:
        load_files(files)
        raise
    return StagedSpec(spec, files, tuple(documents))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: a load allocates many long-lived objects and frees no cycles, and the
    collector's full passes over a growing heap made loading grow faster than linearly."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_files(files: Mapping[str, bytes | str], *, staged: list[tuple[str, Any]] | None = None) -> Spec:
    """Build the spec; with ``staged`` the JSON Schema pass is skipped and the documents collected."""
    problems: list[Problem] = []
    located: list[tuple[Origin, manifests.Manifest]] = []
    caught: list[Problem] = []
    broken: set[tuple[str, str]] = set()
    unknown = False  # a broken document whose kind or name cannot be read
    for name in sorted(files):
        if not name.endswith(MANIFEST_SUFFIXES) or name.startswith(SEED_DIR):
            continue
        content = files[name]
        text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
        parsed = _documents(name, text, problems)
        unknown = unknown or parsed is None
        for origin, document in parsed or ():
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                built = _build(origin, document, problems, staged=staged)
            caught.extend(Problem(origin.file, origin.document, "", str(w.message)) for w in seen)
            if built is not None:
                located.append((origin, built))
                continue
            declared = _declared(document)
            if declared is None:
                unknown = True
            else:
                broken.add(declared)
    if not located and not problems:
        raise SpecError(
            [Problem("", None, "", "no manifests found; add .yaml files with apiVersion dap.io/v1")]
        )
    origins, duplicates = _origins(located)
    problems.extend(duplicates)
    # The rules run on whatever built, even beside broken documents, so one run reports every
    # problem (issue 17); a duplicate takes part through its first declaration only.
    spec = Spec(
        manifests=tuple(man for origin, man in located if origins[(man.kind, man.key)] is origin),
        origins=origins,
        warnings=tuple(caught),
        unbuilt=Unbuilt(frozenset(broken), unknown),
    )
    problems.extend(validation.check(spec))
    if problems:
        raise SpecError(problems)
    return spec  # no problem means nothing failed to build: its ``unbuilt`` is empty


def _declared(document: Any) -> tuple[str, str] | None:
    """``(kind, key)`` a document that failed to build meant to declare, if that can be read."""
    if not isinstance(document, dict):
        return None
    kind, metadata = document.get("kind"), document.get("metadata")
    if kind not in manifests.KINDS or not isinstance(metadata, dict):
        return None
    name, module = metadata.get("name"), metadata.get("module")
    if not isinstance(name, str) or not isinstance(module, str | None):
        return None
    return kind, f"{module}/{name}" if module else name


def _documents(name: str, text: str, problems: list[Problem]) -> list[tuple[Origin, Any]] | None:
    """The documents of one file; ``None`` (and a problem) when its YAML cannot be read."""
    try:
        documents = list(yamls.load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = getattr(exc, "problem", None) or str(exc)
        problems.append(Problem(name, None, "", f"YAML syntax error{where}: {detail}"))
        return None
    return [(Origin(name, index), doc) for index, doc in enumerate(documents, start=1) if doc is not None]


def _build(
    origin: Origin, document: Any, problems: list[Problem], *, staged: list[tuple[str, Any]] | None = None
) -> manifests.Manifest | None:
    def report(path: str, message: str) -> None:
        problems.append(Problem(origin.file, origin.document, path, message))

    if not isinstance(document, dict):
        report("", "a manifest must be a mapping with apiVersion, kind, metadata and spec")
        return None
    kind = document.get("kind")
    if kind not in manifests.KINDS:
        report("kind", f"unknown kind {kind!r}; use one of {', '.join(manifests.KINDS)}")
        return None
    if staged is not None:
        staged.append((kind, document))
    else:
        try:
            schema.fast_validator_for(kind)(document)
        except fastjsonschema.JsonSchemaException as fast_error:
            _report_schema_errors(kind, document, fast_error, report)
            return None
    try:
        built = manifests.KINDS[kind].model_validate(document)
    except pydantic.ValidationError as exc:
        for item in exc.errors():
            message = item["msg"].removeprefix("Value error, ")
            report(json_path(str(p) if not isinstance(p, int) else p for p in item["loc"]), message)
        return None
    module_scoped = kind in manifests.MODULE_SCOPED
    if module_scoped and not built.metadata.module:
        report("metadata.module", f"a {kind} belongs to a module; add metadata.module")
        return None
    if not module_scoped and built.metadata.module:
        report("metadata.module", f"a {kind} is not part of a module; remove metadata.module")
        return None
    return built


def _report_schema_errors(
    kind: str, document: Any, fast_error: Exception, report: Callable[[str, str], None]
) -> None:
    """Every schema error of a document the fast validator refused, explained for its author."""
    errors = sorted(schema.validator_for(kind).iter_errors(document), key=lambda e: list(e.absolute_path))
    for error in errors:
        for path, message in _explain(error):
            report(path, message)
    if not errors:  # the two validators disagree: never let a document through unreported
        report("", str(fast_error))


def _origins(
    located: list[tuple[Origin, manifests.Manifest]],
) -> tuple[Mapping[tuple[str, str], Origin], list[Problem]]:
    origins: dict[tuple[str, str], Origin] = {}
    problems: list[Problem] = []
    for origin, man in located:
        key = (man.kind, man.key)
        first = origins.get(key)
        if first is not None:
            problems.append(
                Problem(
                    origin.file,
                    origin.document,
                    "metadata.name",
                    f"duplicate {man.kind} {man.key!r}, first declared in {first.file}#{first.document}; "
                    "rename one of them",
                )
            )
            continue
        origins[key] = origin
    return MappingProxyType(origins), problems


def _explain(error: SchemaError) -> list[tuple[str, str]]:
    """Turn one jsonschema error into (path, message) pairs a manifest author can act on."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        non_null = [e for e in error.context if e.schema != {"type": "null"} and e.validator != "type"]
        from jsonschema.exceptions import best_match

        return _explain(best_match(non_null or error.context))
    path = list(error.absolute_path)
    where = json_path(path)
    value: Any = error.instance
    rule: Any = error.validator_value
    subschema: Any = error.schema
    if error.validator == "additionalProperties":
        allowed = sorted(subschema.get("properties", {}))
        known = set(allowed)
        return [(json_path([*path, key]), _unknown_key(key, allowed)) for key in value if key not in known]
    if error.validator == "required":
        missing = [k for k in rule if k not in value]
        return [(json_path([*path, k]), f"missing required key {k!r}; add it") for k in missing]
    if error.validator == "type":
        got = _JSON_TYPES.get(type(value), "null" if value is None else type(value).__name__)
        return [(where, f"expected {rule}, got {got} {value!r}")]
    if error.validator == "enum":
        options = [str(v) for v in rule]
        close = difflib.get_close_matches(str(value), options, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        return [(where, f"{value!r} is not allowed; {guess}use one of: {', '.join(options)}")]
    if error.validator == "const":
        return [(where, f"{value!r} is not allowed; use {rule!r}")]
    if error.validator == "pattern":
        pattern = rule
        return [(where, f"{value!r} does not match the pattern {pattern}{_PATTERN_HINTS.get(pattern, '')}")]
    return [(where, error.message)]


def _unknown_key(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(str(key), allowed, n=1)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]!r}?"
    return f"unknown key {key!r}; allowed keys here: {', '.join(allowed)}"


_PATTERN_HINTS = {
    "^[a-z][a-z0-9_]*$": " (lower snake_case starting with a letter, e.g. unit_price)",
    "^[a-z][a-z0-9-]*$": " (lower kebab-case starting with a letter, e.g. manager-review)",
    "^[a-z][a-z0-9_-]*$": " (lower case letters, digits, _ or -, starting with a letter)",
}
