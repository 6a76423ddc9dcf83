"""The ``/ctx`` primitives on records: ``entity/get|set|update|increment|decrement`` and ``db/query``.

Every statement carries the scope's ``tenant_id`` (the app never names a tenant), reads and writes
the entity's typed columns through the server's storage faces (``tables``, ``records``, ``sql``)
and answers the record as the REST API shows it (``documents.reading.present``). The spec's rules:

- ``set`` replaces the whole data (fields left out take their default or null); ``update`` merges
  the given fields; both validate like a REST write (422 naming each field) and refuse read-only
  fields such as a state machine's ``state``. A ``set`` of an id that does not exist creates it.
- ``increment``/``decrement`` change one numeric field by ``amount`` (a positive number);
  ``decrement`` is refused (409 ``SVC.CTX.INSUFFICIENT``) when the field is smaller than
  ``amount``, so the value never goes below it. Each of set, update, increment and decrement is one
  atomic statement; each bumps ``version``; none checks it (get, compare, set does that).
- ``db/query``'s ``named`` is an entity declared in the manifests (``module/entity``): its
  ``filter`` is ``{field: value}`` or ``{field: {op: value}}`` with the REST list operators. No SQL
  ever comes from the app.

A transaction entity's write is judged by the workspace's accounting periods as every other write
path is (``dap.server.access.periods``): its stored transaction date and the one it gets, each
period held (shared) in the call's transaction; 422 ``SVC.PERIOD.CLOSED`` in a closed
period. The app is no closer: a period that is closing refuses it too.

An entity must be exposed over REST to be reachable here (the catalog compiles its read plan only
then); any other is a 404 saying so.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from dap.config.enums import Characteristic, FieldType, FilterOp
from dap.config.fields import Field
from dap.server import errors, fieldvalues
from dap.server.access import guards, periods
from dap.server.catalog import Catalog, Resource
from dap.server.documents import reading
from dap.server.storage import caching, db, queries, sql, tables

INSUFFICIENT = "SVC.CTX.INSUFFICIENT"
BAD = "SVC.CTX.BAD_REQUEST"
NUMERIC = frozenset(
    {FieldType.INTEGER, FieldType.DECIMAL, FieldType.MONEY, FieldType.NUMBER, FieldType.PERCENT}
)
MAX_ROWS = 1000


def resource_of(catalog: Catalog, named: Any) -> Resource:
    if not isinstance(named, str) or named.count("/") != 1:
        raise errors.BadRequest("named must be module/entity", code=BAD)
    resource = catalog.resources.get(named)
    if resource is None:
        raise errors.NotFound(
            f"no entity {named!r} is declared and exposed over REST in the loaded manifests",
            code="SVC.CTX.ENTITY_NOT_FOUND",
        )
    return resource


def record_id(body: Mapping[str, Any]) -> uuid.UUID:
    try:
        return uuid.UUID(str(body.get("key")))
    except ValueError as exc:
        raise errors.BadRequest("key must be the record's id (a uuid)", code=BAD) from exc


def _writable(resource: Resource) -> dict[str, Field]:
    return {n: f for n, f in resource.fields.items() if resource.table.column_for(n) is not None}


def _column_values(resource: Resource, values: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in values.items():
        column = resource.table.column_for(name)
        assert column is not None
        out[column.name] = value
    return out


def _coerce(resource: Resource, data: Any, *, partial: bool) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise errors.BadRequest("fields (or data) must be an object", code=BAD)
    try:
        return fieldvalues.coerce_row(_writable(resource), data, partial=partial)
    except fieldvalues.InvalidRowError as exc:
        raise errors.ValidationFailed(
            f"{len(exc.problems)} field(s) of {resource.key} are invalid",
            code="SVC.CTX.INVALID",
            errors=[errors.FieldProblem(p, m) for p, m in exc.problems],
        ) from exc


async def _periods(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, rid: uuid.UUID, values: Mapping[str, Any]
) -> None:
    """409 ``SVC.PERSIST.CROSS_CATEGORY`` for a summary (the engine writes it alone); 422
    ``SVC.PERIOD.CLOSED`` when the record's stored transaction date, or the one ``values`` (column
    → value) gives it, falls in a period closed to the app; nothing for other entities."""
    if resource.spec.characteristic is Characteristic.SUMMARY:
        raise guards.cross_category(resource, "a /ctx write")
    name = periods.field_of(resource.spec)
    column = resource.column(name) if name is not None else None
    if name is None or column is None:
        return
    col, table = tables.quote(column), tables.quote(resource.table.name)
    stored = await conn.fetchrow(
        f"SELECT {col} FROM {table} WHERE tenant_id = $1 AND id = $2 FOR UPDATE", tenant, rid
    )
    if stored is not None:
        await periods.guard(conn, tenant, name, stored[column], may_post_closing=False)
    if column in values:
        await periods.guard(conn, tenant, name, values[column], may_post_closing=False)


def _not_found(resource: Resource, rid: uuid.UUID) -> errors.NotFound:
    return errors.NotFound(f"no {resource.key} {rid} in this workspace", code="SVC.CTX.RECORD_NOT_FOUND")


async def get(conn: db.Connection, resource: Resource, tenant: uuid.UUID, rid: uuid.UUID) -> dict[str, Any]:
    statement, args = sql.select_one(resource.table, tenant, rid)
    row = await conn.fetchrow(statement, *args)
    if row is None:
        raise _not_found(resource, rid)
    return reading.present(resource, row)


async def set_(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, rid: uuid.UUID, data: Any, *, owner: str
) -> dict[str, Any]:
    """Replace the whole data of ``rid`` (create it when missing): one ``INSERT … ON CONFLICT``."""
    values = _column_values(resource, _coerce(resource, data, partial=False))
    for name in _writable(resource):  # the whole data: what is left out is cleared
        column = resource.table.column_for(name)
        assert column is not None
        values.setdefault(column.name, None)
    await _periods(conn, resource, tenant, rid, values)
    cols = ["tenant_id", "id", "created_by", "owner", *values]
    args: list[Any] = [tenant, rid, owner, owner, *values.values()]
    table = tables.quote(resource.table.name)
    sets = ", ".join(f"{tables.quote(c)} = EXCLUDED.{tables.quote(c)}" for c in values)
    statement = (
        f"INSERT INTO {table} ({', '.join(tables.quote(c) for c in cols)}) "
        f"VALUES ({', '.join(f'${i}' for i in range(1, len(cols) + 1))}) "
        f"ON CONFLICT (tenant_id, id) DO UPDATE SET {sets}{', ' if sets else ''}"
        f"version = {table}.version + 1, updated_at = now() RETURNING {resource.table.select_columns}"
    )
    row = await conn.fetchrow(statement, *args)
    assert row is not None
    await caching.announce(conn, resource, tenant, rid)
    return reading.present(resource, row)


async def update(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, rid: uuid.UUID, fields: Any
) -> dict[str, Any]:
    values = _column_values(resource, _coerce(resource, fields, partial=True))
    await _periods(conn, resource, tenant, rid, values)
    statement, args = sql.update(resource.table, tenant, rid, values, expected_version=None)
    row = await conn.fetchrow(statement, *args)
    if row is None:
        raise _not_found(resource, rid)
    await caching.announce(conn, resource, tenant, rid)
    return reading.present(resource, row)


def _amount(resource: Resource, body: Mapping[str, Any]) -> tuple[Field, str, Any]:
    name = body.get("field")
    f = resource.fields.get(name) if isinstance(name, str) else None
    column = resource.table.column_for(name) if f is not None and isinstance(name, str) else None
    if f is None or column is None or f.type not in NUMERIC or f.multiple:
        raise errors.BadRequest(f"field must name a numeric field of {resource.key}", code=BAD)
    if f.read_only or f.computed is not None:
        raise errors.ValidationFailed(f"{name} is read-only", code="SVC.CTX.INVALID")
    raw = body.get("amount", 1)
    try:
        amount = fieldvalues.coerce(f, raw)
    except fieldvalues.InvalidValueError as exc:
        raise errors.ValidationFailed(f"amount: {exc}", code="SVC.CTX.INVALID") from exc
    if isinstance(amount, bool) or not isinstance(amount, int | float | Decimal) or amount <= 0:
        raise errors.ValidationFailed("amount must be a number above 0", code="SVC.CTX.INVALID")
    return f, column.name, amount


async def add(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    rid: uuid.UUID,
    body: Mapping[str, Any],
    *,
    sign: int,
) -> dict[str, Any]:
    """``increment`` (sign 1) or ``decrement`` (sign -1): one statement; ``{value, version}``."""
    f, column, amount = _amount(resource, body)
    await _periods(conn, resource, tenant, rid, {})
    col = tables.quote(column)
    table = tables.quote(resource.table.name)
    guard = f" AND {col} >= $3" if sign < 0 else ""
    statement = (
        f"UPDATE {table} SET {col} = COALESCE({col}, 0) {'+' if sign > 0 else '-'} $3, "
        f"version = version + 1, updated_at = now() WHERE tenant_id = $1 AND id = $2{guard} "
        f"RETURNING {col}, version"
    )
    row = await conn.fetchrow(statement, tenant, rid, amount)
    if row is None:
        found = await conn.fetchval(
            f"SELECT {col} FROM {table} WHERE tenant_id = $1 AND id = $2", tenant, rid
        )
        if found is None and not await conn.fetchval(
            f"SELECT true FROM {table} WHERE tenant_id = $1 AND id = $2", tenant, rid
        ):
            raise _not_found(resource, rid)
        raise errors.Conflict(
            f"{f.name} of {resource.key} {rid} is {found}, smaller than {amount}: nothing was decremented",
            code=INSUFFICIENT,
            errors=[errors.FieldProblem(f.name, f"is {found}; cannot take {amount}")],
        )
    await caching.announce(conn, resource, tenant, rid)
    return {"value": fieldvalues.to_json(f, row[column]), "version": row["version"]}


def _conditions(resource: Resource, filter_: Any) -> tuple[queries.Condition, ...]:
    if filter_ is None:
        return ()
    if not isinstance(filter_, dict):
        raise errors.BadRequest("filter must be an object", code=BAD)
    out = []
    for name, given in filter_.items():
        f = resource.fields.get(name) or queries.SYSTEM.get(name)
        column = resource.table.column_for(name) if name in resource.fields else name
        if f is None or column is None or (name not in resource.fields and name == "docstatus"):
            raise errors.BadRequest(f"filter: {name!r} is no field of {resource.key}", code=BAD)
        col_name = column.name if not isinstance(column, str) else column
        pairs = given.items() if isinstance(given, dict) else [("eq", given)]
        for op_name, value in pairs:
            try:
                op = FilterOp(op_name)
            except ValueError as exc:
                raise errors.BadRequest(f"filter: unknown operator {op_name!r}", code=BAD) from exc
            raw = (
                value
                if isinstance(value, list)
                else []
                if op in (FilterOp.NULL, FilterOp.NOTNULL)
                else [value]
            )
            try:
                values = tuple(fieldvalues.coerce(f, v) for v in raw)
            except fieldvalues.InvalidValueError as exc:
                raise errors.BadRequest(f"filter {name}: {exc}", code=BAD) from exc
            out.append(queries.Condition(col_name, op, values))
    return tuple(out)


async def query(
    conn: db.Connection, resource: Resource, tenant: uuid.UUID, body: Mapping[str, Any]
) -> dict[str, Any]:
    limit = body.get("limit", 100)
    if not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
        raise errors.BadRequest(f"limit must be 1..{MAX_ROWS}", code=BAD)
    q = queries.ListQuery(
        _conditions(resource, body.get("filter")),
        (queries.SortKey("created_at", False), queries.SortKey("id", False)),
        limit,
        0,
        False,
        None,
    )
    statement, args = sql.select_list(resource.table, q, tenant, None)
    rows = await conn.fetch(statement, *args)
    return {"data": [reading.present(resource, r) for r in rows]}
