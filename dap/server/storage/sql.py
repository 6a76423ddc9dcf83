"""Parameterised SQL for the REST actions, built from the typed list query. Pure.

Every statement starts its ``WHERE`` with ``tenant_id = $1``: a statement that does not carry
the tenant cannot be built here. Identifiers come from the table description (validated
manifest names, quoted); values are always ``$n`` parameters. The builders return
``(sql, args)`` so the handlers stay thin and the tests can read the SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dap.config.enums import FilterOp
from dap.server.storage.queries import Condition, ListQuery
from dap.server.storage.tables import Table, quote

_COMPARE = {
    FilterOp.EQ: "=",
    FilterOp.NEQ: "<>",
    FilterOp.GT: ">",
    FilterOp.GTE: ">=",
    FilterOp.LT: "<",
    FilterOp.LTE: "<=",
    FilterOp.LIKE: "LIKE",
    FilterOp.ILIKE: "ILIKE",
}

Statement = tuple[str, list[Any]]


def flat(statement: Statement) -> tuple[Any, ...]:
    """``(sql, args)`` as the positional arguments of ``conn.execute``/``fetch``."""
    return (statement[0], *statement[1])


class _Args:
    def __init__(self, *values: Any) -> None:
        self.values: list[Any] = list(values)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def _columns(table: Table, names: Sequence[str] | None) -> str:
    if names is None:
        return table.select_columns
    cols = [c.name for c in table.columns if c.name != "tenant_id" and (names is None or c.name in names)]
    return ", ".join(quote(c) for c in cols)


def _where(query: ListQuery, args: _Args) -> str:
    return " AND ".join(["tenant_id = $1", *(_condition(cond, args) for cond in query.conditions)])


def _condition(cond: Condition, args: _Args) -> str:
    col = quote(cond.column)
    op = cond.op
    if op is FilterOp.NULL:
        return f"{col} IS NULL"
    if op is FilterOp.NOTNULL:
        return f"{col} IS NOT NULL"
    if op is FilterOp.BETWEEN:
        return f"{col} BETWEEN {args.add(cond.values[0])} AND {args.add(cond.values[1])}"
    if op is FilterOp.IN and len(cond.values) == 1:
        # one value (a row scope's username, most often) as ``=``: Postgres 16 reads a B-tree in
        # order only when no column after the first is compared with ``= ANY`` (storage.indexing)
        return f"{col} = {args.add(cond.values[0])}"
    if op is FilterOp.IN:
        return f"{col} = ANY({args.add(list(cond.values))})"
    if op is FilterOp.NIN:
        return f"NOT ({col} = ANY({args.add(list(cond.values))}))"
    return f"{col} {_COMPARE[op]} {args.add(cond.values[0])}"


def _scope(scope: Sequence[Condition], args: _Args) -> str:
    """`` AND …`` of row-scope conditions (``scoping``), empty for an unscoped caller."""
    return "".join(f" AND {_condition(cond, args)}" for cond in scope)


def select_list(
    table: Table, query: ListQuery, tenant: uuid.UUID, columns: Sequence[str] | None
) -> Statement:
    args = _Args(tenant)
    where = _where(query, args)
    order = ", ".join(f"{quote(k.column)} {'DESC' if k.descending else 'ASC'}" for k in query.sort)
    limit = args.add(query.limit)
    offset = args.add(query.offset)
    sql = (
        f"SELECT {_columns(table, columns)} FROM {quote(table.name)} WHERE {where} "
        f"ORDER BY {order} LIMIT {limit} OFFSET {offset}"
    )
    return sql, args.values


def count(table: Table, query: ListQuery, tenant: uuid.UUID) -> Statement:
    args = _Args(tenant)
    return f"SELECT count(*) FROM {quote(table.name)} WHERE {_where(query, args)}", args.values


def select_one(
    table: Table, tenant: uuid.UUID, record_id: uuid.UUID, *, scope: Sequence[Condition] = ()
) -> Statement:
    """One record by id; with ``scope`` only when the caller's row scope admits it."""
    if not scope:
        return table.select_by_id, [tenant, record_id]
    args = _Args(tenant, record_id)
    where = f"tenant_id = $1 AND id = $2{_scope(scope, args)}"
    return f"SELECT {_columns(table, None)} FROM {quote(table.name)} WHERE {where}", args.values


def values_of(
    table_name: str, columns: Sequence[str], tenant: uuid.UUID, record_id: uuid.UUID, *, share: bool = False
) -> Statement:
    """Some columns of one record; ``share`` locks it against writes until the transaction ends."""
    cols = ", ".join(quote(c) for c in columns)
    lock = " FOR SHARE" if share else ""
    return (
        f"SELECT {cols} FROM {quote(table_name)} WHERE tenant_id = $1 AND id = $2{lock}",
        [tenant, record_id],
    )


# The text of :func:`insert` and :func:`update` per table and column set (a table's writes repeat
# a few), so that a write builds only its argument list: the text took 460 bytecodes of a create.
# Kept by the table's id with the table itself (an id is not reused while its entry lives);
# emptied when full, as a process swapping catalogs many times over would fill it.
_TEXTS: dict[tuple[Any, ...], tuple[Table, str]] = {}
MAX_TEXTS = 4096


def _kept(key: tuple[Any, ...], table: Table) -> str | None:
    found = _TEXTS.get(key)
    return found[1] if found is not None and found[0] is table else None


def _keep(key: tuple[Any, ...], table: Table, text: str) -> str:
    if len(_TEXTS) >= MAX_TEXTS:
        _TEXTS.clear()
    _TEXTS[key] = (table, text)
    return text


def insert(table: Table, tenant: uuid.UUID, values: Mapping[str, Any], *, owner: str) -> Statement:
    """``values`` maps column → value; ``created_by`` and ``owner`` are the caller."""
    columns = tuple(values)
    key = (id(table), columns)
    sql = _kept(key, table)
    if sql is None:
        cols = ["tenant_id", "created_by", "owner", *columns]
        params = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
        sql = _keep(
            key,
            table,
            f"INSERT INTO {quote(table.name)} ({', '.join(quote(c) for c in cols)}) "
            f"VALUES ({params}) RETURNING {_columns(table, None)}",
        )
    return sql, [tenant, owner, owner, *values.values()]


def insert_places(values: Mapping[str, Any]) -> dict[str, int]:
    """The parameter number of each column in :func:`insert`'s statement for ``values``. Pure."""
    places = {"tenant_id": 1, "created_by": 2, "owner": 3}
    for i, column in enumerate(values):
        places[column] = 4 + i
    return places


def update_places(values: Mapping[str, Any]) -> dict[str, int]:
    """The parameter number of each column :func:`update`'s statement sets from ``values``. Pure."""
    places = {"tenant_id": 1}
    for i, column in enumerate(values):
        places[column] = 2 + i
    return places


def update(
    table: Table,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    values: Mapping[str, Any],
    *,
    expected_version: int | None,
    draft_only: bool = False,
) -> Statement:
    """Set ``values``, bump ``version``; with ``expected_version`` only when it still matches, and
    with ``draft_only`` only while the document is a draft (``docstatus = 0``)."""
    columns = tuple(values)
    args = [tenant, *values.values(), record_id]
    if expected_version is not None:
        args.append(expected_version)
    key = (id(table), columns, expected_version is not None, draft_only)
    sql = _kept(key, table)
    if sql is None:
        sets = ["version = version + 1", "updated_at = now()"]
        sets += [f"{quote(column)} = ${i}" for i, column in enumerate(columns, start=2)]
        where = f"tenant_id = $1 AND id = ${len(columns) + 2}"
        if expected_version is not None:
            where += f" AND version = ${len(columns) + 3}"
        if draft_only:
            where += " AND docstatus = 0"
        returning = _columns(table, None)
        sql = _keep(
            key,
            table,
            f"UPDATE {quote(table.name)} SET {', '.join(sets)} WHERE {where} RETURNING {returning}",
        )
    return sql, args


def delete(table: Table, tenant: uuid.UUID, record_id: uuid.UUID) -> Statement:
    return f"DELETE FROM {quote(table.name)} WHERE tenant_id = $1 AND id = $2", [tenant, record_id]


def exists(table: Table, tenant: uuid.UUID, record_id: uuid.UUID) -> Statement:
    return f"SELECT version FROM {quote(table.name)} WHERE tenant_id = $1 AND id = $2", [tenant, record_id]


def child_rows(child: Table, tenant: uuid.UUID, parent_ids: Sequence[uuid.UUID]) -> Statement:
    cols = ", ".join(quote(c.name) for c in child.columns if c.name != "tenant_id")
    return (
        f"SELECT {cols} FROM {quote(child.name)} WHERE tenant_id = $1 AND parent_id = ANY($2) "
        "ORDER BY parent_id, idx",
        [tenant, list(parent_ids)],
    )


def delete_children(child: Table, tenant: uuid.UUID, parent_id: uuid.UUID) -> Statement:
    return f"DELETE FROM {quote(child.name)} WHERE tenant_id = $1 AND parent_id = $2", [tenant, parent_id]


def insert_children(child: Table, columns: Sequence[str]) -> str:
    """One child row per ``executemany`` tuple: ``(tenant_id, parent_id, idx, *columns)``."""
    cols = ["tenant_id", "parent_id", "idx", *columns]
    params = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    return f"INSERT INTO {quote(child.name)} ({', '.join(quote(c) for c in cols)}) VALUES ({params})"


def related_found(table_name: str) -> str:
    """Which of the ids ``$2`` (uuid[]) name records of the tenant ``$1`` in the table.

    The rows found are locked ``FOR KEY SHARE`` to the end of the write, as a foreign key would lock
    them: a concurrent delete of one (which locks it ``FOR UPDATE`` first) waits, then sees the new
    referrer.
    """
    return f"SELECT id FROM {quote(table_name)} WHERE tenant_id = $1 AND id = ANY($2::uuid[]) FOR KEY SHARE"


def clear_reference(
    table_name: str, column: str, tenant: uuid.UUID, record_id: uuid.UUID, versioned: bool
) -> Statement:
    bump = ", version = version + 1, updated_at = now()" if versioned else ""
    col = quote(column)
    return (
        f"UPDATE {quote(table_name)} SET {col} = NULL{bump} WHERE tenant_id = $1 AND {col} = $2",
        [tenant, record_id],
    )


def delete_referrers(
    table_name: str, column: str, tenant: uuid.UUID, record_id: uuid.UUID, *, returning: bool = False
) -> Statement:
    """Delete the rows referring to ``record_id``; ``returning``: answer their ids."""
    tail = " RETURNING id" if returning else ""
    return (
        f"DELETE FROM {quote(table_name)} WHERE tenant_id = $1 AND {quote(column)} = $2{tail}",
        [tenant, record_id],
    )


def delete_children_of_referrers(
    child: str, table_name: str, column: str, tenant: uuid.UUID, record_id: uuid.UUID
) -> Statement:
    return (
        f"DELETE FROM {quote(child)} WHERE tenant_id = $1 AND parent_id IN "
        f"(SELECT id FROM {quote(table_name)} WHERE tenant_id = $1 AND {quote(column)} = $2)",
        [tenant, record_id],
    )
