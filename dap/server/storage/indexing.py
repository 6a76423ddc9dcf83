"""Derived indexes: the composite indexes that serve every list the manifests declare. Pure.

The manifests say which queries the server will run on an entity's table: a Table's filters (the
entity's own ``filters`` when the Table declares none, as the UI does), fixed filters and sort, a
Kanban's column (its ``group_by`` value), a Listing's filters, the relation picker of every
relation field (the target sorted by its display field), and on all of them the entity's row
scope (assignments and session filters: an equality the server always adds; constant fixed
filters). From those this module computes indexes in the one shape a B-tree serves a
list with: ``tenant_id``, then the columns compared for equality, then the range or sort column(s),
then ``id`` (the REST list's tie-breaker, so a page is read in index order and the scan stops at
``LIMIT``). The rules, in order:

1. every list is scoped to one tenant: ``tenant_id`` leads;
2. equality columns that every query of the list carries (constant fixed filters, the table's
   ``fixed_filters``, a kanban's ``group_by``) follow;
3. a ``null``/``notnull`` constant fixed filter becomes the index's predicate (``WHERE col IS
   NULL``): a partial index. Other constants stay columns, as the server binds them as parameters
   and a generic plan cannot prove a parameter implies a partial predicate;
4. the sort follows (a table's ``sort``, else the REST default ``-created_at``), then ``id``;
   directions are kept relative to the first sort key (a B-tree is read backwards too);
5. the row scope's equalities (assignments, session filters) come after ``id``: the list is read in
   sort order and the scope is checked in the index entries (no row is fetched to test it), so one
   index serves the scoped list and the all-rows view of a caller holding the entity's all-rows
   permission (its keys are a prefix). When a partial predicate parts the two views, the scope
   leads after ``tenant_id`` instead and the all-rows view gets its own index;
6. an optional equality filter on a column of a few declared values (``docstatus``, a boolean, an
   enum or a field with ``options``) also trails ``id``, checked in the index as the list is read;
   on any other column (an open set, where a rare value would walk the tenant's index) it adds one
   index with its column between the equalities and the sort. A range filter (``date_range``,
   ``gte``…) on the sort column is served by the sort; on another column it adds ``(tenant_id,
   equalities…, column)``;
7. substring filters (``text`` filters are ``ilike '%…%'``), ``neq``/``nin`` and JSON columns are
   served by no B-tree: they are reported, and the list walks its sort index filtering as it goes;
8. an index whose keys are a prefix of another's with the same predicate is served by that one
   and dropped (an ``index: true`` one too: the longer index serves its lookups); a unique index
   is never dropped, and serves a list sorted by its column (a unique key has no ties to break).

Rules 5 and 6 trade a few index entries read per page for fewer indexes to maintain on every write
(docs/performance.md, issue 48: 10 indexes on the example's orders became 6).

:func:`derive` answers the indexes per table with the lists each serves (``dap schema --indexes``)
and what no index serves (``dap validate``'s warnings); :func:`apply` puts them on the tables the
migration planner compares.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dap.config.apps import KanbanSpec, ListingSpec, TableSpec
from dap.config.entities import EntitySpec, FilterSpec
from dap.config.enums import FieldType, FilterFrom, FilterOp, FilterType
from dap.config.fields import Field
from dap.server.storage.tables import Index, Table, ident, quote

DEFAULT_SORT = (("created_at", True),)  # the REST list's default order (workflows.filters)
SYSTEM_COLUMNS = frozenset({"id", "version", "docstatus", "created_at", "updated_at", "owner"})
_EQUAL = frozenset({FilterOp.EQ, FilterOp.IN})
_RANGE = frozenset({FilterOp.GT, FilterOp.GTE, FilterOp.LT, FilterOp.LTE, FilterOp.BETWEEN})
_NULLS = frozenset({FilterOp.NULL, FilterOp.NOTNULL})


@dataclass(frozen=True)
class Shape:
    """The queries of one declared list, as fields (not yet columns)."""

    source: str  # what declares it: "table buying/purchase_orders", "kanban …", "relation …"
    entity: str  # module/name
    equal: tuple[str, ...] = ()  # compared for equality by every query of the list
    optional: tuple[str, ...] = ()  # equality filters a user may set
    ranges: tuple[str, ...] = ()  # range filters a user may set
    sort: tuple[tuple[str, bool], ...] = DEFAULT_SORT  # (field, descending)
    nulls: tuple[tuple[str, bool], ...] = ()  # (field, is null) constants: the partial predicate
    residual: tuple[tuple[str, str], ...] = ()  # (field, why no B-tree serves it)
    scope: tuple[str, ...] = ()  # those of ``equal`` that are the row scope's (not the list's own)


@dataclass(frozen=True)
class Derived:
    """One index of a table with the lists it serves (empty for a declared index nothing lists)."""

    table: str
    index: Index
    serves: tuple[str, ...]
    origin: str  # "derived", "unique", "declared" (index: true) or "relation"


@dataclass(frozen=True)
class Derivation:
    indexes: tuple[Derived, ...]
    warnings: tuple[str, ...]  # declared filters or sorts no index serves

    def of(self, table: str) -> tuple[Derived, ...]:
        return tuple(d for d in self.indexes if d.table == table)


# --- declared lists → shapes ---------------------------------------------------------------


def _qualify(ref: str, module: str) -> str:
    if "/" in ref:
        return ref
    if "." in ref:
        return ref.replace(".", "/", 1)
    return f"{module}/{ref}"


def _scope(spec: EntitySpec) -> tuple[list[str], list[tuple[str, bool]], list[str]]:
    """Row scope as (equalities, null predicates, ranges), the rules ``access.scoping`` applies."""
    equal = [a.field for a in spec.assignments]
    nulls: list[tuple[str, bool]] = []
    ranges: list[str] = []
    for flt in (*spec.filters, *spec.fixed_filters):
        if flt.from_ is FilterFrom.SESSION and flt.attr:
            (equal if flt.op in _EQUAL else ranges).append(flt.field)
    for flt in spec.fixed_filters:
        if flt.from_ is not None:
            continue
        if flt.op in _NULLS:
            nulls.append((flt.field, flt.op is FilterOp.NULL))
        elif flt.value is not None and flt.op in _EQUAL:
            equal.append(flt.field)
        elif flt.value is not None and flt.op in _RANGE:
            ranges.append(flt.field)
    return equal, nulls, ranges


def _filters(filters: Iterable[FilterSpec]) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """A view's user filters as the REST query the UI sends for each (``ui/src/logic.ts``)."""
    optional: list[str] = []
    ranges: list[str] = []
    residual: list[tuple[str, str]] = []
    for flt in filters:
        if flt.from_ is FilterFrom.SESSION:
            continue  # row scope, counted with the entity
        kind = flt.type or FilterType.TEXT
        if flt.from_ is FilterFrom.ROUTE:
            kind = FilterType.SELECT  # a route parameter is a value, compared as declared
        if kind is FilterType.DATE_RANGE or flt.op in _RANGE:
            ranges.append(flt.field)
        elif kind is FilterType.TEXT:
            residual.append((flt.field, "a text filter is a substring match (ilike '%…%')"))
        elif flt.op in _EQUAL or flt.op in _NULLS:
            optional.append(flt.field)
        else:
            residual.append((flt.field, f"op {flt.op} excludes values, which no B-tree seeks"))
    return optional, ranges, residual


def _sort(text: str | None) -> tuple[tuple[str, bool], ...]:
    if not text:
        return DEFAULT_SORT
    return tuple((part.lstrip("-"), part.startswith("-")) for part in text.split(","))


def _shape(
    source: str,
    entity: str,
    spec: EntitySpec,
    *,
    equal: Iterable[str] = (),
    optional: Iterable[str] = (),
    ranges: Iterable[str] = (),
    sort: tuple[tuple[str, bool], ...] = DEFAULT_SORT,
    residual: Iterable[tuple[str, str]] = (),
    all_rows: bool = False,
) -> Shape:
    """A list's shape with the entity's row scope added (it narrows every query of the list)."""
    scope_equal, nulls, scope_ranges = _scope(spec)
    if all_rows:  # a caller holding the entity's all-rows permission lists without its row scope
        scope_equal, nulls, scope_ranges = [], [], []
    return Shape(
        source,
        entity,
        equal=(*scope_equal, *equal),
        optional=tuple(optional),
        ranges=(*scope_ranges, *ranges),
        sort=sort,
        nulls=tuple(nulls),
        residual=tuple(residual),
        scope=tuple(scope_equal),
    )


def declared_lists(
    entities: Mapping[str, EntitySpec], views: Iterable[tuple[str, object]]
) -> tuple[Shape, ...]:
    """The shapes of every declared list: ``views`` are (key, spec) of Table, Kanban and Listing
    manifests (other specs are skipped), plus the relation picker of every relation field."""
    out: list[Shape] = []
    for key, view in sorted(views, key=lambda kv: kv[0]):
        if not isinstance(view, TableSpec | KanbanSpec | ListingSpec):
            continue
        entity = _qualify(view.entity, key.split("/", 1)[0])
        spec = entities.get(entity)
        if spec is None:
            continue
        declared = view.filters
        if isinstance(view, TableSpec) and not declared:  # the UI offers the entity's own then
            declared = tuple(f for f in spec.filters if f.from_ is None)
        optional, ranges, residual = _filters(declared)
        if isinstance(view, TableSpec):
            source, equal, sort = (
                f"table {key}",
                [f.field for f in view.fixed_filters if f.op in _EQUAL],
                _sort(view.sort),
            )
        elif isinstance(view, KanbanSpec):
            source, equal, sort = f"kanban {key}", [view.group_by], DEFAULT_SORT
        else:
            source, equal, sort = f"listing {key}", [], DEFAULT_SORT
        out.append(
            _shape(
                source,
                entity,
                spec,
                equal=equal,
                optional=optional,
                ranges=ranges,
                sort=sort,
                residual=residual,
            )
        )
        if out[-1].equal != tuple(equal) or out[-1].nulls:  # a row scope narrows it: the all-rows view
            out.append(_shape(f"{source} (all rows)", entity, spec, equal=equal, sort=sort, all_rows=True))
    for key in sorted(entities):
        spec = entities[key]
        module = key.split("/", 1)[0]
        for f in spec.fields:
            if f.removed or f.type is not FieldType.RELATION or f.relation is None:
                continue
            target = _qualify(f.relation.entity, module)
            target_spec = entities.get(target)
            display = f.relation.display_field
            if target_spec is None or display is None:
                continue
            # the picker lists the target sorted by its display field (ui/src/views/fields.ts)
            out.append(
                _shape(f"relation picker {key}.{f.name}", target, target_spec, sort=((display, False),))
            )
    return tuple(out)


# --- shapes → indexes ----------------------------------------------------------------------

Key = tuple[str, bool]  # (column, descending)


@dataclass(frozen=True)
class _Want:
    table: Table
    keys: tuple[Key, ...]
    where: str | None
    source: str


def _column(table: Table, spec: EntitySpec, name: str) -> tuple[str | None, str | None]:
    """The B-tree-comparable column of field ``name``, or (None, why not)."""
    if name in SYSTEM_COLUMNS:
        return (name, None) if table.column(name) is not None else (None, f"{name} is no column here")
    col = table.column_for(name)
    f: Field | None = spec.field(name)
    if col is None or f is None:
        return None, f"{name} has no column"
    if col.sql_type == "jsonb":
        return None, f"{name} is stored as JSON"
    return col.name, None


def _few(table: Table, spec: EntitySpec, column: str) -> bool:
    """Whether ``column`` holds one of a few declared values (``docstatus``, a boolean, an enum or
    a field with ``options``): a filter on it keeps a share of the rows large enough that reading
    the list's sort index and checking the column in the index finds a page in a few pages' reads."""
    if column == "docstatus":
        return True
    col = table.column(column)
    f = spec.field(col.field) if col is not None and col.field else None
    return f is not None and (f.type in (FieldType.BOOLEAN, FieldType.ENUM) or bool(f.options))


def _oriented(sort: tuple[Key, ...]) -> tuple[Key, ...]:
    """Sort keys with the first ascending (the index is read backwards for the opposite order)."""
    if sort and sort[0][1]:
        return tuple((c, not d) for c, d in sort)
    return sort


def _wants(shape: Shape, table: Table, spec: EntitySpec) -> tuple[list[_Want], list[str]]:
    warnings: list[str] = []

    def columns(names: Iterable[str], what: str) -> list[str]:
        found: list[str] = []
        for name in names:
            col, why = _column(table, spec, name)
            if col is None:
                warnings.append(f"{shape.source}: {what} {name!r} is served by no index: {why}")
            elif col not in found:
                found.append(col)
        return found

    for name, reason in shape.residual:
        warnings.append(
            f"{shape.source}: filter {name!r} is served by no index ({reason}); the list walks its sort index"
        )
    scope = columns(shape.scope, "row scope")
    equal = [c for c in columns(shape.equal, "equality") if c not in scope or shape.nulls]
    predicate = []
    for name, is_null in shape.nulls:
        col, why = _column(table, spec, name)
        if col is None:
            warnings.append(f"{shape.source}: fixed filter {name!r} is served by no index: {why}")
            continue
        predicate.append(f"{quote(col)} IS {'' if is_null else 'NOT '}NULL")
    where = " AND ".join(sorted(predicate)) or None
    sort_keys: list[Key] = []
    for name, desc in shape.sort:
        col, why = _column(table, spec, name)
        if col is None:
            warnings.append(f"{shape.source}: sort {name!r} is served by no index: {why}")
            sort_keys = []
            break
        sort_keys.append((col, desc))
    if sort_keys and not any(c == "id" for c, _ in sort_keys):
        sort_keys.append(("id", sort_keys[-1][1]))
    sort = _oriented(tuple(sort_keys))
    lead: tuple[Key, ...] = (("tenant_id", False), *((c, False) for c in equal))
    # rule 5: the row scope trails the sort (checked in the index while it is read in order), so
    # the all-rows view's index is a prefix of this one; unless a partial predicate parts them
    trail = [c for c in scope if c not in equal and c not in (k for k, _ in sort)]
    optional = [c for c in columns(shape.optional, "filter") if c not in equal]
    few = [c for c in optional if _few(table, spec, c) and c not in trail and c not in (k for k, _ in sort)]
    tail: tuple[Key, ...] = tuple((c, False) for c in (*trail, *few))
    wants = [_Want(table, lead + sort + tail, where, shape.source)]
    for col in optional:
        if col not in few:  # rule 6: an open-ended equality filter gets its own index
            wants.append(_Want(table, (*lead, (col, False), *sort, *tail), where, shape.source))
    first_sort = sort[0][0] if sort else None
    for col in columns(shape.ranges, "range filter"):
        if col != first_sort:
            wants.append(_Want(table, (*lead, (col, False)), where, shape.source))
    return wants, warnings


def _name(table: Table, keys: tuple[Key, ...], where: str | None) -> str:
    parts = [c + ("_desc" if d else "") for c, d in keys if c != "tenant_id"]
    full = f"{table.full_name or table.name}__{'__'.join(parts)}"
    if where is not None:
        full += "__p" + hashlib.sha256(where.encode()).hexdigest()[:6]
    return ident(full + "__idx")


def _keys_of(index: Index) -> tuple[Key, ...]:
    descending = index.descending or (False,) * len(index.columns)
    return tuple(zip(index.columns, descending, strict=True))


def _covers(longer: tuple[Key, ...], shorter: tuple[Key, ...], *, unique: bool = False) -> bool:
    """Whether an index on ``longer`` serves the queries of one on ``shorter``: a prefix, or, for a
    unique index, ``shorter`` less its ``id`` tie-breaker (a unique key has no ties to break)."""
    if len(longer) >= len(shorter) and longer[: len(shorter)] == shorter:
        return True
    return unique and len(shorter) == len(longer) + 1 and shorter[-1][0] == "id" and shorter[:-1] == longer


def _origin(table: Table, spec: EntitySpec | None, index: Index) -> str:
    if index.unique:
        return "unique"
    column = table.column(index.columns[-1])
    f = spec.field(column.field) if spec is not None and column is not None and column.field else None
    return "declared" if f is not None and f.index else "relation"


def derive(tables: Iterable[Table], entities: Mapping[str, EntitySpec], lists: Iterable[Shape]) -> Derivation:
    """The indexes of every entity table: declared ones and those the lists need, deduplicated."""
    mains = {t.entity: t for t in tables if t.kind == "entity"}
    wants: dict[str, list[_Want]] = {}
    warnings: list[str] = []
    for shape in lists:
        table, spec = mains.get(shape.entity), entities.get(shape.entity)
        if table is None or spec is None:
            continue
        found, said = _wants(shape, table, spec)
        wants.setdefault(table.name, []).extend(found)
        warnings.extend(said)
    out: list[Derived] = []
    for table in mains.values():
        spec = entities.get(table.entity)
        # (keys, where, unique, origin, name) candidates; table.indexes are the per-field ones
        kept: list[tuple[tuple[Key, ...], str | None, bool, str, str]] = [
            (_keys_of(i), i.where, i.unique, _origin(table, spec, i), i.name) for i in table.indexes
        ]
        served: dict[int, list[str]] = {}
        for want in wants.get(table.name, []):
            kept.append((want.keys, want.where, False, "derived", _name(table, want.keys, want.where)))
            served.setdefault(len(kept) - 1, []).append(want.source)
        # an index is dropped when a longer one with its predicate covers it (never a unique one);
        # the lists it served go to the longest that covers it
        alive = list(range(len(kept)))
        for i, (keys, where, unique, _kind, _) in enumerate(kept):
            if unique:
                continue
            cover = [
                j
                for j in alive
                if j != i
                and kept[j][1] == where
                and _covers(kept[j][0], keys, unique=kept[j][2])
                # a longer index, or an identical one that stays (earlier, unique or declared)
                and (len(kept[j][0]) > len(keys) or j < i or kept[j][2] or kept[j][3] == "declared")
            ]
            if cover:
                j = max(cover, key=lambda k: (len(kept[k][0]), kept[k][2]))
                served.setdefault(j, []).extend(served.pop(i, []))
                alive.remove(i)
        for i in alive:
            keys, where, unique, origin, name = kept[i]
            columns = tuple(c for c, _ in keys)
            descending = tuple(d for _, d in keys) if any(d for _, d in keys) else ()
            index = Index(name, columns, unique, descending=descending, where=where)
            out.append(Derived(table.name, index, tuple(dict.fromkeys(served.get(i, []))), origin))
    return Derivation(tuple(out), tuple(dict.fromkeys(warnings)))


def apply(tables: tuple[Table, ...], derivation: Derivation) -> tuple[Table, ...]:
    """``tables`` with each entity table's indexes replaced by the derivation's."""
    by_table: dict[str, list[Derived]] = {}
    for d in derivation.indexes:
        by_table.setdefault(d.table, []).append(d)
    out: list[Table] = []
    for t in tables:
        if t.kind != "entity" or t.name not in by_table:
            out.append(t)
            continue
        out.append(dataclasses.replace(t, indexes=tuple(d.index for d in by_table[t.name])))
    return tuple(out)


# The engine's own queries run on platform tables whose DDL declares their indexes (each module's
# ``ensure_schema``); listed here with what they serve, so ``dap schema --indexes`` shows them too
# (tests/server/test_indexing.py checks that each exists).
ENGINE: tuple[tuple[str, str, str], ...] = (
    (
        "dap.approvals",
        "approvals_inbox",
        "the approval inbox: a tenant's pending approvals by created_at, id",
    ),
    ("dap.approvals", "approvals_one_open", "one pending approval per record; a record's approvals"),
    ("dap.approvals", "approvals_due", "escalations: pending approvals by escalate_at"),
    ("dap.approval_votes", "approval_votes_one", "a voter's vote on a step (the inbox's NOT EXISTS)"),
    ("dap.jobs", "jobs_open", "the job worker's claim: queued and running jobs by created_at"),
    ("dap.jobs", "jobs_callbacks", "job callbacks due"),
    ("dap.outbox", "outbox_undelivered", "the events dispatcher: undelivered events by id"),
    ("dap.outbox", "outbox_record_undelivered", "a record's undelivered events, in order"),
    ("dap.outbox", "outbox_seq", "the event feed: events after a sequence number"),
    ("dap.notifications", "notifications_user", "a user's notifications, newest first"),
)


def render(derivation: Derivation) -> str:
    """Every index with the lists it serves, for people (``dap schema --indexes``)."""
    lines: list[str] = []
    table = None
    for d in sorted(derivation.indexes, key=lambda d: (d.table, d.index.name)):
        if d.table != table:
            table = d.table
            lines.append(f"{table}:")
        i = d.index
        descending = i.descending or (False,) * len(i.columns)
        cols = ", ".join(c + (" DESC" if desc else "") for c, desc in zip(i.columns, descending, strict=True))
        where = f" WHERE {i.where}" if i.where else ""
        unique = "unique " if i.unique else ""
        lines.append(f"  {unique}{i.name} ({cols}){where} [{d.origin}]")
        lines += [f"      serves {s}" for s in d.serves]
    lines.append("engine (declared by the platform tables):")
    lines += [f"  {index} on {table}\n      serves {what}" for table, index, what in ENGINE]
    lines += [f"warning: {w}" for w in derivation.warnings]
    return "\n".join(lines)
