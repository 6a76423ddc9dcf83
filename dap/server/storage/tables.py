"""Entities → Postgres tables: columns, keys, indexes and identifier shortening. Pure.

ARCHITECTURE.md fixes the layout: one table ``"<module>__<entity>"`` per entity, a typed column
per field, ``PRIMARY KEY (tenant_id, id)``, every unique index led by ``tenant_id`` (so that a
later distribution by ``tenant_id`` needs no change), system columns, child tables keyed by
``(tenant_id, parent_id, idx)`` and a jsonb column per extension namespace. This module only
*describes* tables; ``migrations`` compares descriptions and ``schema_sync`` talks to Postgres.

Postgres cuts identifiers at 63 bytes. Longer names are shortened deterministically: the first
50 bytes, ``_``, and 12 hex digits of the SHA-256 of the full name. The mapping is kept in the
schema registry so that people can find a table from its entity.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from dap.config.entities import EntitySpec
from dap.config.enums import ChildStorage, FieldType
from dap.config.fields import Field

MAX_IDENT = 63
_KEEP = 50

SYSTEM_FIELDS = ("id", "version", "docstatus", "created_at", "updated_at", "created_by", "owner")
CHILD_KEYS = frozenset({"tenant_id", "parent_id", "idx"})
DOCSTATUS = ("draft", "submitted", "cancelled")  # stored as smallint 0, 1, 2
DEFAULT_MONEY_PRECISION = 19
DEFAULT_MONEY_SCALE = 2


def ident(name: str) -> str:
    """A Postgres identifier for ``name``: itself when short enough, else prefix + hash."""
    raw = name.encode()
    if len(raw) <= MAX_IDENT:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return f"{raw[:_KEEP].decode(errors='ignore')}_{digest}"


def quote(identifier: str) -> str:
    """Double-quote an identifier (names come from validated manifests; quotes are doubled anyway)."""
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True)
class Column:
    name: str  # the Postgres identifier
    sql_type: str
    field: str | None = None  # the manifest field; None for system columns
    nullable: bool = True
    default: str | None = None  # SQL expression, system columns only

    def ddl(self) -> str:
        parts = [quote(self.name), self.sql_type]
        if not self.nullable:
            parts.append("NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default}")
        return " ".join(parts)


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False
    descending: tuple[bool, ...] = ()  # per column; empty: all ascending (``indexing`` derives these)
    where: str | None = None  # a partial index's predicate (SQL over quoted columns)

    def ddl(self, table: str, *, concurrently: bool = False) -> str:
        """``CREATE [UNIQUE] INDEX [CONCURRENTLY] IF NOT EXISTS`` of this index on ``table``."""
        descending = self.descending or (False,) * len(self.columns)
        cols = ", ".join(
            quote(c) + (" DESC" if desc else "") for c, desc in zip(self.columns, descending, strict=True)
        )
        unique = "UNIQUE " if self.unique else ""
        online = "CONCURRENTLY " if concurrently else ""
        where = f" WHERE {self.where}" if self.where else ""
        return (
            f"CREATE {unique}INDEX {online}IF NOT EXISTS {quote(self.name)} ON {quote(table)} ({cols}){where}"
        )


@dataclass(frozen=True)
class Table:
    name: str  # the Postgres identifier, in the entity's default schema
    entity: str  # "module/name"
    kind: str  # "entity" or "child"
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[Index, ...] = ()
    full_name: str = ""  # before shortening
    field: str | None = None  # for a child table: the parent's child field
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)  # long name -> identifier

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @functools.cached_property
    def select_columns(self) -> str:
        """The quoted column list every read returns (all but ``tenant_id``), built once."""
        return ", ".join(quote(c.name) for c in self.columns if c.name != "tenant_id")

    @functools.cached_property
    def select_by_id(self) -> str:
        """The unscoped lookup of one record (``$1`` tenant, ``$2`` id), built once: a find's statement."""
        return f"SELECT {self.select_columns} FROM {quote(self.name)} WHERE tenant_id = $1 AND id = $2"

    def column_for(self, field_name: str) -> Column | None:
        return self._by_field.get(field_name)

    @functools.cached_property
    def _by_field(self) -> dict[str, Column]:
        """Each field's column (the first, as the scan it replaces found), built once: every write
        looks up each of its fields."""
        found: dict[str, Column] = {}
        for c in self.columns:
            if c.field is not None:
                found.setdefault(c.field, c)
        return found


def numeric_type(f: Field) -> str:
    scale = f.scale_digits
    if f.type is FieldType.MONEY:
        precision = f.precision or DEFAULT_MONEY_PRECISION
        return f"numeric({precision},{scale if scale is not None else DEFAULT_MONEY_SCALE})"
    if f.precision is not None:
        return f"numeric({f.precision},{scale or 0})"
    if scale is not None:
        return f"numeric(38,{scale})"
    return "numeric"


def sql_type(f: Field) -> str | None:
    """The column type of field ``f``; ``None`` when it has no column (a child stored in a table).

    Computed fields have a column of their type: the server stores each write's result there.
    """
    if f.type is FieldType.CHILD:
        if f.child is not None and f.child.storage is ChildStorage.TABLE:
            return None
        return "jsonb"
    if f.multiple and f.type not in (FieldType.JSON, FieldType.ATTACHMENT):
        return "jsonb"  # a set of values: a JSON array keeps each value's type
    return {
        FieldType.STRING: "text",
        FieldType.TEXT: "text",
        FieldType.RICHTEXT: "text",
        FieldType.INTEGER: "bigint",
        FieldType.BOOLEAN: "boolean",
        FieldType.ENUM: "text",
        FieldType.DATE: "date",
        FieldType.DATETIME: "timestamptz",
        FieldType.TIME: "time",
        FieldType.UUID: "uuid",
        FieldType.JSON: "jsonb",
        FieldType.FILE: "text",
        FieldType.ATTACHMENT: "jsonb",
        FieldType.RELATION: "uuid",
        FieldType.NUMBER: "double precision",
    }.get(f.type) or numeric_type(f)


def _system_columns(lifecycle: bool) -> list[Column]:
    cols = [
        Column("tenant_id", "uuid", nullable=False),
        Column("id", "uuid", nullable=False, default="gen_random_uuid()"),
        Column("version", "bigint", nullable=False, default="1"),
    ]
    if lifecycle:
        cols.append(Column("docstatus", "smallint", nullable=False, default="0"))
    cols += [
        Column("created_at", "timestamptz", nullable=False, default="now()"),
        Column("updated_at", "timestamptz", nullable=False, default="now()"),
        Column("created_by", "text"),
        Column("owner", "text"),
    ]
    return cols


def table_name(module: str, entity: str) -> str:
    return f"{module}__{entity}"


def resolve_ref(ref: str, module: str) -> str:
    """``name`` → ``module/name``; ``other/name`` and ``other.name`` stay in their module."""
    if "/" in ref:
        return ref
    if "." in ref:
        return ref.replace(".", "/", 1)
    return f"{module}/{ref}"


def _field_columns(
    fields: tuple[Field, ...], aliases: dict[str, str], reserved: frozenset[str] = frozenset()
) -> tuple[list[Column], list[Field]]:
    columns: list[Column] = []
    children: list[Field] = []
    for f in fields:
        if f.removed:
            continue
        if f.type is FieldType.CHILD and f.child is not None and f.child.storage is ChildStorage.TABLE:
            children.append(f)
            continue
        kind = sql_type(f)
        if kind is None or f.name in SYSTEM_FIELDS or f.name == "tenant_id" or f.name in reserved:
            continue
        name = ident(f.name)
        if name != f.name:
            aliases[f.name] = name
        columns.append(Column(name, kind, field=f.name))
    return columns, children


def _indexes(
    table: str, columns: list[Column], fields: tuple[Field, ...], aliases: dict[str, str]
) -> list[Index]:
    out: list[Index] = []
    by_field = {c.field: c for c in columns if c.field}
    for f in fields:
        col = by_field.get(f.name)
        if col is None or col.sql_type == "jsonb":
            continue
        if f.unique or f.natural_key:
            full = f"{table}__{f.name}__key"
            out.append(Index(ident(full), ("tenant_id", col.name), unique=True))
        elif f.index or f.type is FieldType.RELATION:
            full = f"{table}__{f.name}__idx"
            out.append(Index(ident(full), ("tenant_id", col.name)))
        else:
            continue
        if ident(full) != full:
            aliases[full] = ident(full)
    return out


def child_fields(f: Field, module: str, entities: Mapping[str, EntitySpec]) -> tuple[Field, ...]:
    """The fields of a child row: declared inline, or those of the referenced entity."""
    assert f.child is not None
    if f.child.fields:
        return f.child.fields
    if f.child.entity:
        target = entities.get(resolve_ref(f.child.entity, module))
        if target is not None:
            return target.fields
    return ()


def entity_tables(
    module: str,
    name: str,
    spec: EntitySpec,
    *,
    entities: Mapping[str, EntitySpec],
    extensions: tuple[str, ...] = (),
) -> tuple[Table, ...]:
    """The tables of one entity: its own, then one per child field stored as a table."""
    key = f"{module}/{name}"
    full = table_name(module, name)
    aliases: dict[str, str] = {}
    tname = ident(full)
    if tname != full:
        aliases[full] = tname
    field_cols, children = _field_columns(spec.fields, aliases)
    columns = _system_columns(spec.lifecycle) + field_cols
    for namespace in extensions:
        columns.append(Column(ident(f"ext_{namespace}"), "jsonb", field=f"ext_{namespace}"))
    indexes = _indexes(full, field_cols, spec.fields, aliases)
    tables = [
        Table(
            name=tname,
            entity=key,
            kind="entity",
            columns=tuple(columns),
            primary_key=("tenant_id", "id"),
            indexes=tuple(indexes),
            full_name=full,
            aliases=aliases,
        )
    ]
    for child in children:
        cfull = f"{full}__{child.name}"
        caliases: dict[str, str] = {}
        cname = ident(cfull)
        if cname != cfull:
            caliases[cfull] = cname
        # a child field named like a key column (typically the sequence field ``idx``) is that column
        row_fields = child_fields(child, module, entities)
        ccols, _nested = _field_columns(row_fields, caliases, CHILD_KEYS)
        declares_idx = any(f.name == "idx" and not f.removed for f in row_fields)
        base = [
            Column("tenant_id", "uuid", nullable=False),
            Column("parent_id", "uuid", nullable=False),
            Column("idx", "integer", nullable=False, field="idx" if declares_idx else None),
        ]
        tables.append(
            Table(
                name=cname,
                entity=key,
                kind="child",
                columns=tuple(base + ccols),
                primary_key=("tenant_id", "parent_id", "idx"),
                full_name=cfull,
                field=child.name,
                aliases=caliases,
            )
        )
    return tuple(tables)


def all_tables(entities: Mapping[str, EntitySpec]) -> tuple[Table, ...]:
    """Every table of a spec, keyed by entity ``module/name``, in a stable order.

    An entity that ``extends`` another adds a jsonb column to the target's table and has no
    table of its own.
    """
    extensions: dict[str, list[str]] = {}
    for key, spec in entities.items():
        if spec.extends is not None:
            module = key.split("/", 1)[0]
            extensions.setdefault(resolve_ref(spec.extends.target, module), []).append(spec.extends.namespace)
    out: list[Table] = []
    for key in sorted(entities):
        spec = entities[key]
        if spec.extends is not None:
            continue
        module, name = key.split("/", 1)
        out.extend(
            entity_tables(
                module, name, spec, entities=entities, extensions=tuple(sorted(extensions.get(key, ())))
            )
        )
    return tuple(out)
