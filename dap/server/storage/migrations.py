"""The migration planner: stored registry + manifests → ordered, classified steps. Pure.

``plan`` compares the tables recorded in the schema registry (what the database was last
migrated to) with the tables the manifests describe now, and returns the steps in the order
they must run. Each step is *safe* (create a table, add a nullable column, add or drop an index,
widen a type) or *destructive*. A destructive step is *declared* when the manifests consent to
it: ``removed: true`` drops a column, ``renamed_from`` renames one, ``accept_data_loss`` with a
``reason`` allows a lossy type change. A destructive change without its declaration is a
*blocker*: nothing may be applied while one exists.

Safe steps run at boot; declared destructive ones only through ``dap migrate``. A non-unique index
on a table that exists already is an *online* step: built with ``CREATE INDEX CONCURRENTLY`` after
the migration commits (``storage.building``), and an index that gives way is dropped after them. Tables whose
entity disappeared from the manifests are left in place (there is no declaration that drops a
table); the plan lists them as notes.

The registry stores each table as the JSON of :func:`table_to_json`, so the planner never has to
introspect ``information_schema`` and the comparison is exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dap.config.entities import EntitySpec
from dap.config.fields import Field
from dap.server.storage import tables
from dap.server.storage.tables import Column, Index, Table, quote


class Safety(StrEnum):
    SAFE = "safe"
    DESTRUCTIVE = "destructive"


@dataclass(frozen=True)
class Step:
    kind: str  # create_table, add_column, create_index, drop_index, alter_type, rename_column, drop_column
    table: str
    description: str
    statements: tuple[str, ...]
    safety: Safety = Safety.SAFE
    reason: str | None = None
    # built with CREATE INDEX CONCURRENTLY after the migration commits (``storage.building``): a
    # non-unique index on a table that exists already, which may hold millions of rows
    online: bool = False
    index: str | None = None  # the index a create_index or drop_index step is about

    @property
    def destructive(self) -> bool:
        return self.safety is Safety.DESTRUCTIVE


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    blockers: tuple[str, ...]
    desired: tuple[Table, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def safe(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if not s.destructive)

    @property
    def destructive(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.destructive)

    def render(self) -> str:
        """The plan as lines for people (``dap migrate`` prints it)."""
        lines = [
            f"{len(self.steps)} step(s), {len(self.destructive)} destructive, {len(self.blockers)} blocker(s)"
        ]
        for i, s in enumerate(self.steps, 1):
            why = f" — reason: {s.reason}" if s.reason else ""
            online = ", online" if s.online else ""
            lines.append(f"  {i:3}. [{s.safety}{online}] {s.description}{why}")
        lines += [f"  BLOCKED: {b}" for b in self.blockers]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# --- registry (de)serialisation -------------------------------------------------------------


def table_to_json(t: Table) -> dict[str, Any]:
    return {
        "name": t.name,
        "entity": t.entity,
        "kind": t.kind,
        "full_name": t.full_name,
        "field": t.field,
        "primary_key": list(t.primary_key),
        "columns": [
            {
                "name": c.name,
                "type": c.sql_type,
                "field": c.field,
                "nullable": c.nullable,
                "default": c.default,
            }
            for c in t.columns
        ],
        "indexes": [_index_to_json(i) for i in t.indexes],
        "aliases": dict(t.aliases),
    }


def _index_to_json(i: Index) -> dict[str, Any]:
    out: dict[str, Any] = {"name": i.name, "columns": list(i.columns), "unique": i.unique}
    if i.descending:  # written only when set, so registries from before derived indexes still match
        out["descending"] = list(i.descending)
    if i.where:
        out["where"] = i.where
    return out


def table_from_json(data: Mapping[str, Any]) -> Table:
    return Table(
        name=data["name"],
        entity=data["entity"],
        kind=data["kind"],
        full_name=data.get("full_name") or data["name"],
        field=data.get("field"),
        primary_key=tuple(data["primary_key"]),
        columns=tuple(
            Column(
                c["name"], c["type"], field=c.get("field"), nullable=c["nullable"], default=c.get("default")
            )
            for c in data["columns"]
        ),
        indexes=tuple(
            Index(
                i["name"],
                tuple(i["columns"]),
                bool(i["unique"]),
                descending=tuple(i.get("descending") or ()),
                where=i.get("where"),
            )
            for i in data["indexes"]
        ),
        aliases=dict(data.get("aliases") or {}),
    )


# --- type changes ---------------------------------------------------------------------------

_NUMERIC = re.compile(r"numeric(?:\((\d+),(\d+)\))?")
_WIDENINGS = {
    ("bigint", "double precision"),
    ("date", "timestamptz"),
    ("smallint", "bigint"),
    ("integer", "bigint"),
}


def is_widening(old: str, new: str) -> bool:
    """Whether every value of type ``old`` converts to ``new`` without loss."""
    if old == new or new == "text":
        return True
    if (old, new) in _WIDENINGS:
        return True
    old_num, new_num = _NUMERIC.fullmatch(old), _NUMERIC.fullmatch(new)
    if new_num is not None and (old_num is not None or old in ("bigint", "integer", "smallint")):
        if new_num.group(1) is None:  # unbounded numeric holds everything
            return True
        if old_num is None or old_num.group(1) is None:
            return False
        p_old, s_old = int(old_num.group(1)), int(old_num.group(2))
        p_new, s_new = int(new_num.group(1)), int(new_num.group(2))
        return s_new >= s_old and p_new - s_new >= p_old - s_old
    return False


def _using(column: str, new_type: str) -> str:
    if new_type == "jsonb":
        return f"to_jsonb({quote(column)})"
    return f"{quote(column)}::{new_type}"


# --- planning -------------------------------------------------------------------------------


def _declared_fields(t: Table, entities: Mapping[str, EntitySpec]) -> dict[str, Field]:
    """The manifest fields (tombstones included) that own ``t``'s columns."""
    spec = entities.get(t.entity)
    if spec is None:
        return {}
    if t.kind == "child":
        parent = spec.field(t.field or "")
        if parent is None or parent.child is None:
            return {}
        module = t.entity.split("/", 1)[0]
        return {f.name: f for f in tables.child_fields(parent, module, entities)}
    return {f.name: f for f in spec.fields}


def _create_table(t: Table) -> list[Step]:
    cols = ",\n    ".join(c.ddl() for c in t.columns)
    pk = ", ".join(quote(c) for c in t.primary_key)
    steps = [
        Step(
            "create_table",
            t.name,
            f"create table {t.name} for {t.entity}",
            (f"CREATE TABLE {quote(t.name)} (\n    {cols},\n    PRIMARY KEY ({pk})\n)",),
        )
    ]
    steps += [_create_index(t, i) for i in t.indexes]
    return steps


def _create_index(t: Table, i: Index, *, existing: bool = False) -> Step:
    """A new index; on a table that ``existing`` already holds rows, a non-unique one is built
    online. A unique one stays in the migration: a duplicate must refuse the change, as before."""
    unique = "unique " if i.unique else ""
    online = existing and not i.unique
    where = f" where {i.where}" if i.where else ""
    return Step(
        "create_index",
        t.name,
        f"create {unique}index {i.name} on {t.name} ({', '.join(i.columns)}){where}",
        (i.ddl(t.name, concurrently=online),),
        online=online,
        index=i.name,
    )


def _alter_table(prior: Table, t: Table, decls: Mapping[str, Field]) -> tuple[list[Step], list[str]]:
    steps: list[Step] = []
    blockers: list[str] = []
    consumed: set[str] = set()
    tq = quote(t.name)
    for col in t.columns:
        old = prior.column(col.name)
        decl = decls.get(col.field or "")
        if old is None and decl is not None and decl.renamed_from:
            source = prior.column_for(decl.renamed_from)
            if source is not None and t.column(source.name) is None:
                consumed.add(source.name)
                steps.append(
                    Step(
                        "rename_column",
                        t.name,
                        f"rename column {t.name}.{source.name} to {col.name}",
                        (f"ALTER TABLE {tq} RENAME COLUMN {quote(source.name)} TO {quote(col.name)}",),
                        Safety.DESTRUCTIVE,
                        decl.reason,
                    )
                )
                old = Column(col.name, source.sql_type, field=col.field)
        if old is None:
            ddl = col.ddl()
            steps.append(
                Step(
                    "add_column",
                    t.name,
                    f"add column {t.name}.{col.name} {col.sql_type}",
                    (f"ALTER TABLE {tq} ADD COLUMN {ddl}",),
                )
            )
            continue
        consumed.add(old.name)
        if old.sql_type == col.sql_type:
            continue
        using = _using(col.name, col.sql_type)
        stmt = f"ALTER TABLE {tq} ALTER COLUMN {quote(col.name)} TYPE {col.sql_type} USING {using}"
        what = f"change type of {t.name}.{col.name} from {old.sql_type} to {col.sql_type}"
        if is_widening(old.sql_type, col.sql_type):
            steps.append(Step("alter_type", t.name, what, (stmt,)))
        elif decl is not None and decl.accept_data_loss and decl.reason:
            steps.append(Step("alter_type", t.name, what, (stmt,), Safety.DESTRUCTIVE, decl.reason))
        else:
            blockers.append(
                f"{t.entity}: {what} may lose data; declare accept_data_loss: true and a reason on field "
                f"{col.field!r}"
            )
    for old in prior.columns:
        if old.name in consumed or t.column(old.name) is not None or old.field is None:
            continue
        decl = decls.get(old.field)
        if decl is not None and decl.removed:
            steps.append(
                Step(
                    "drop_column",
                    t.name,
                    f"drop column {t.name}.{old.name}",
                    (f"ALTER TABLE {tq} DROP COLUMN {quote(old.name)}",),
                    Safety.DESTRUCTIVE,
                    decl.reason,
                )
            )
        else:
            blockers.append(
                f"{t.entity}: field {old.field!r} disappeared from the manifests; to drop its column "
                f"declare it with removed: true (and a reason), or restore it"
            )
    prior_idx = {i.name: i for i in prior.indexes}
    want_idx = {i.name: i for i in t.indexes}
    for name, i in prior_idx.items():
        if want_idx.get(name) != i:
            # dropped after the online builds (the index it gives way to may be one of them), unless
            # an index of its name replaces it now
            online = not i.unique and name not in want_idx
            verb = "DROP INDEX CONCURRENTLY" if online else "DROP INDEX"
            steps.append(
                Step(
                    "drop_index",
                    t.name,
                    f"drop index {name}",
                    (f"{verb} IF EXISTS {quote(name)}",),
                    online=online,
                    index=name,
                )
            )
    for name, i in want_idx.items():
        if prior_idx.get(name) != i:
            steps.append(_create_index(t, i, existing=True))
    return steps, blockers


def plan(
    registry: Mapping[str, Table], desired: tuple[Table, ...], entities: Mapping[str, EntitySpec]
) -> Plan:
    """The ordered steps from ``registry`` (what the database has) to ``desired``."""
    steps: list[Step] = []
    blockers: list[str] = []
    for t in desired:
        prior = registry.get(t.name)
        if prior is None:
            steps += _create_table(t)
            continue
        more, blocked = _alter_table(prior, t, _declared_fields(t, entities))
        steps += more
        blockers += blocked
    wanted = {t.name for t in desired}
    notes = tuple(
        f"table {name} ({registry[name].entity}) is no longer described by the manifests; left in place"
        for name in sorted(set(registry) - wanted)
    )
    # drops first (indexes, columns), so that renames and re-creations never collide
    order = {
        "drop_index": 0,
        "rename_column": 1,
        "drop_column": 2,
        "create_table": 3,
        "add_column": 4,
        "alter_type": 5,
        "create_index": 6,
    }
    steps.sort(key=lambda s: order[s.kind])
    return Plan(tuple(steps), tuple(blockers), desired, notes)
