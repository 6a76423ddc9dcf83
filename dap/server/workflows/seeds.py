"""Seed files: what a spec directory's ``seed/`` folder holds, read into rows that know where they
came from. Pure: text in, rows or problems out (``seeding`` loads the rows).

A seed file is YAML, one or more documents, each naming one entity and listing its records::

    entity: buying/purchase_order      # module/entity
    records:
      - _key: po-north-draft           # the seed's key where the entity has no natural key it gives
        supplier: NORDSTAHL            # a relation names its target by natural key (or seed key)
        order_date: today-3            # dates: ISO, ``today`` or ``today±N`` days
        lines:
          - {item: BOLT-M8, qty: 100}
        _submit: true                  # created and submitted in one step, as ``POST …?submit=true``
        _actions: [request_approval, approve]  # then these, in order, as ``POST …/{id}/{action}``
        _votes:                        # then votes on the approval it opened, as /_approvals/{id}/…
          - {as: ada, roles: [purchase_committee], approve: true}

Files load in name order (``10-items.yaml`` before ``30-orders.yaml``) and records in file order,
so a record may refer to any record above it. Keys starting with ``_`` are the loader's; every
other key is a field, checked by the same validation as the API. A record's *seed key* is its
natural key field's value when the seed gives it, else ``_key``; it is how a second run finds the
record again (see docs/decisions.md, "Seed data").

Every row carries its file, line and the line of each field, so that a problem names all three.
A CSV import (one entity per file, a header of field names) produces the same :class:`Row` and
goes through the same loader.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server import fieldvalues
from dap.server.workflows import csvdialect

SUFFIXES = (".yaml", ".yml", ".csv")
ACCOUNTS = "users"  # the entity name of password accounts (``seeding_users``)
PERIODS = "periods"  # the entity name of period closes (``seeding_periods``)
LOADER_KEYS = frozenset({"_key", "_submit", "_actions", "_votes"})
_RELATIVE = re.compile(r"today\s*([+-])\s*(\d{1,5})")
_PATH = re.compile(r"[^.\[\]]+|\[\d+\]")  # ``lines[1].qty`` → lines, [1], qty


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one row: where (file, line, field) and what."""

    source: str
    line: int
    field: str | None
    message: str
    code: str | None = None  # the SVC code of an API refusal (its message names it too)
    status: int = 422  # the HTTP status the verb the row stands for would have answered

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


@dataclass(frozen=True)
class Vote:
    """A vote a row casts on the approval its actions opened, as the user ``username``."""

    username: str
    roles: tuple[str, ...]
    approve: bool
    comment: str | None = None


@dataclass(frozen=True)
class Row:
    """One record to load into ``entity`` (``module/entity``), and where it was written."""

    source: str
    line: int
    entity: str
    values: dict[str, Any]  # field → value as JSON would carry it (decimals as Decimal)
    lines: Mapping[str, int] = field(default_factory=dict)  # field → line ("" for the record's own)
    key: str | None = None  # ``_key``
    submit: bool = False  # ``_submit``
    actions: tuple[str, ...] = ()  # ``_actions``
    votes: tuple[Vote, ...] = ()  # ``_votes``
    cells: bool = False  # ``values`` are CSV text, converted by each field's type when loaded
    record_id: str | None = None  # a CSV ``id``: the record the row updates (the export's own)
    version: int | None = None  # a CSV ``version``: the record's version the row was written at
    docstatus: str | None = None  # a CSV ``docstatus``: the record's state the row was written at
    tree: Any = field(default=None, compare=False, repr=False)  # the parsed record, lines and all

    def line_of(self, path: str | None) -> int:
        """The line of a field path such as ``lines[1].qty``: the deepest part of it found in the
        file (a child row's field's own line in YAML; the record's line in CSV)."""
        if not path:
            return self.line
        line, place = self.line, self.tree
        for part in _PATH.findall(path):
            key: Any = int(part[1:-1]) if part.startswith("[") else part
            if isinstance(place, Located) and isinstance(key, str) and key in place:
                line, place = place.lines.get(key, line), place[key]
            elif isinstance(place, list) and isinstance(key, int) and key < len(place):
                place = place[key]
                line = place.line if isinstance(place, Located) else line
            else:
                break
        return line if self.tree is not None else self.lines.get(path.split(".")[0].split("[")[0], line)

    def problem(self, path: str | None, message: str) -> Problem:
        return Problem(self.source, self.line_of(path), path or None, message)

    def digest(self) -> str:
        """What a second run compares: the row as written (``today`` unresolved), never its file."""
        body = {
            "values": self.values,
            "submit": self.submit,
            "actions": list(self.actions),
            "votes": [vars(v) for v in self.votes],
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()


class RowError(Exception):
    """One row's problems, raised inside its savepoint so that it rolls back."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems


class SeedFileError(Exception):
    """Problems found while reading seed files; nothing was loaded."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(map(str, self.problems[:3])))


# --- YAML with lines ---------------------------------------------------------------------------


class Located(dict[str, Any]):
    """A YAML mapping that remembers its line and the line of each key (1-based)."""

    line: int = 0
    lines: dict[str, int]


# libyaml's parser where PyYAML has it (about 10x faster on a large seed), the same marks either way
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    """SafeLoader whose mappings are :class:`Located`, whose decimals stay exact and whose dates
    stay text (the API's validation reads ISO text, and ``today`` is text too)."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)
    out = Located()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[str(key)] = loader.construct_object(value_node, deep=True)
        out.lines[str(key)] = key_node.start_mark.line + 1
    return out


def _decimal(loader: _Loader, node: yaml.ScalarNode) -> Any:
    return fieldvalues.yaml_number(str(loader.construct_scalar(node)))


def _text(loader: _Loader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_constructor("tag:yaml.org,2002:float", _decimal)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _text)


def _plain(value: Any) -> Any:
    """``Located`` → ``dict`` all the way down (the values a row keeps)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_yaml(source: str, text: str) -> list[Row]:
    """The rows of one YAML seed file; :class:`SeedFileError` listing every problem of its shape."""
    problems: list[Problem] = []
    rows: list[Row] = []
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise SeedFileError([Problem(source, line, None, f"not valid YAML: {exc}")]) from exc
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, Located):
            problems.append(Problem(source, 1, None, "a seed document is a mapping with entity and records"))
            continue
        entity = document.get("entity")
        records = document.get("records")
        unknown = sorted(set(document) - {"entity", "records"})
        for key in unknown:
            problems.append(Problem(source, document.lines[key], key, "unknown key (entity, records)"))
        if not isinstance(entity, str) or ("/" not in entity and entity not in (ACCOUNTS, PERIODS)):
            line = document.lines.get("entity", document.line)
            why = (
                f"name the entity as module/entity ({ACCOUNTS}: password accounts, {PERIODS}: period closes)"
            )
            problems.append(Problem(source, line, "entity", why))
            continue
        if not isinstance(records, list):
            line = document.lines.get("records", document.line)
            problems.append(Problem(source, line, "records", "expected a list of records"))
            continue
        for record in records:
            if not isinstance(record, Located):
                line = document.lines.get("records", document.line)
                problems.append(Problem(source, line, None, "each record is a mapping of field: value"))
                continue
            row, wrong = _row(source, entity, record)
            problems += wrong
            if row is not None:
                rows.append(row)
    if problems:
        raise SeedFileError(problems)
    return rows


def _row(source: str, entity: str, record: Located) -> tuple[Row | None, list[Problem]]:
    problems: list[Problem] = []
    lines = dict(record.lines)

    def bad(key: str, message: str) -> None:
        problems.append(Problem(source, lines.get(key, record.line), key, message))

    key = record.get("_key")
    if key is not None and not isinstance(key, str | int):
        bad("_key", "expected text")
    submit = record.get("_submit", False)
    if not isinstance(submit, bool):
        bad("_submit", "expected true or false")
    actions = record.get("_actions", [])
    if isinstance(actions, str):
        actions = [actions]
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        bad("_actions", "expected a list of action names")
        actions = []
    votes = _votes(record.get("_votes", []), bad)
    for name in record:
        if _holds_nul(name) or _holds_nul(record[name]):
            bad(name, "contains a NUL character, which text cannot hold")
        if name.startswith("_") and name not in LOADER_KEYS:
            bad(name, f"unknown loader key (known: {', '.join(sorted(LOADER_KEYS))})")
    if problems:
        return None, problems
    values = {k: _plain(v) for k, v in record.items() if not k.startswith("_")}
    return (
        Row(
            source=source,
            line=record.line,
            entity=entity,
            values=values,
            lines=lines,
            key=None if key is None else str(key),
            submit=bool(submit),
            actions=tuple(actions),
            votes=votes,
            tree=record,
        ),
        [],
    )


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _votes(given: Any, bad: Any) -> tuple[Vote, ...]:
    shape = "expected a list of {as: username, roles: [role], approve: true|false, comment: text}"
    if not isinstance(given, list):
        bad("_votes", shape)
        return ()
    out: list[Vote] = []
    for item in given:
        roles = item.get("roles", []) if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("as"), str)
            or not isinstance(item.get("approve", True), bool)
            or not isinstance(roles, list)
            or set(item) - {"as", "roles", "approve", "comment"}
        ):
            bad("_votes", shape)
            return ()
        comment = item.get("comment")
        out.append(Vote(item["as"], tuple(map(str, roles)), item.get("approve", True), comment))
    return tuple(out)


# --- CSV ---------------------------------------------------------------------------------------


EXPORT_COLUMNS = frozenset({"id", "version", "docstatus"})  # what the UI's export adds to the fields
_SUBMIT = Field(name="submit", type=FieldType.BOOLEAN)  # read as a boolean cell is (``from_text``)


def parse_csv(source: str, text: str, entity: str) -> list[Row]:
    """The rows of one CSV file of ``entity`` (the dialect of ``csvdialect``)."""
    try:
        table = csvdialect.read(text)
    except csvdialect.CsvError as exc:
        raise SeedFileError([Problem(source, exc.line, exc.column_name, exc.message)]) from exc
    return parse_table(source, table, entity)


def parse_table(source: str, table: csvdialect.Table, entity: str) -> list[Row]:
    """The rows of a CSV file read by ``csvdialect``: a header of field names, loader keys and the
    export's ``id``, ``version`` and ``docstatus``; one record per line; an empty cell leaves the
    field out. Values stay text (``cells``): the loader converts each by its field's type."""
    header = table.header
    rows: list[Row] = []
    problems: list[Problem] = []
    for line, cells in table.records:
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            problems.append(Problem(source, line, None, f"{len(cells)} cells for {len(header)} columns"))
            continue
        given = {n: csvdialect.unguarded(c) for n, c in zip(header, cells, strict=True) if c != ""}
        record = Located({n: c for n, c in given.items() if n not in EXPORT_COLUMNS})
        record.line, record.lines = line, dict.fromkeys(header, line)
        wrong: list[Problem] = []
        if "_submit" in record:
            try:
                record["_submit"] = fieldvalues.from_text(_SUBMIT, record["_submit"].strip())
            except fieldvalues.InvalidValueError:
                wrong.append(Problem(source, line, "_submit", "expected true or false (or 1, 0, empty)"))
        if "_actions" in record:
            record["_actions"] = [a.strip() for a in record["_actions"].split(";") if a.strip()]
        version = given.get("version", "").strip()
        if version and not version.isdigit():
            wrong.append(Problem(source, line, "version", "expected the record's version, a whole number"))
        row, refused = _row(source, entity, record)
        problems += wrong + refused
        if row is not None and not wrong:
            rows.append(
                dataclasses.replace(
                    row,
                    cells=True,
                    record_id=given.get("id"),
                    version=int(version) if version else None,
                    docstatus=given.get("docstatus"),
                )
            )
    if problems:
        raise SeedFileError(problems)
    return rows


def parse_files(files: Iterable[tuple[str, str]]) -> list[Row]:
    """Every row of ``(name, text)`` seed files, in name order; a CSV file names its entity
    ``<module>.<entity>.csv``. Every file is read before any problem is raised."""
    rows: list[Row] = []
    problems: list[Problem] = []
    for name, text in sorted(files):
        try:
            if name.endswith(".csv"):
                stem = name.rsplit("/", 1)[-1][: -len(".csv")]
                module, _, entity = stem.rpartition(".")
                module = module.split("-", 1)[-1] if "-" in module else module  # "10-stock.item.csv"
                if not module or not entity:
                    problems.append(Problem(name, 1, None, "name a CSV seed file <module>.<entity>.csv"))
                    continue
                rows += parse_csv(name, text, f"{module}/{entity}")
            else:
                rows += parse_yaml(name, text)
        except SeedFileError as exc:
            problems += exc.problems
    if problems:
        raise SeedFileError(problems)
    return rows


# --- dates -------------------------------------------------------------------------------------


def resolve_dates(value: Any, today: dt.date) -> Any:
    """``today±N`` → the ISO date N days from ``today`` (``today`` itself the API understands);
    applied to every text value of a row, children included."""
    if isinstance(value, str):
        found = _RELATIVE.fullmatch(value.strip())
        if found is None:
            return value
        days = int(found.group(2)) * (1 if found.group(1) == "+" else -1)
        return (today + dt.timedelta(days=days)).isoformat()
    if isinstance(value, dict):
        return {k: resolve_dates(v, today) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_dates(v, today) for v in value]
    return value
