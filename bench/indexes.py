"""Derived indexes at scale: big and small tenants in one table, interleaved (issue 48).

    .venv/bin/python bench/indexes.py [--big 50] [--small 50] [--rows 20000] [--small-rows 10]
                                      [--build-rows 1000000] [--seconds 3] [--quick]

Steps: start an embedded Postgres (or use ``DAP_BENCH_DSN``); migrate the example spec
(``examples/procurement``) with its derived indexes; fill ``buying/purchase_order`` with ``--big``
tenants of ``--rows`` rows and ``--small`` tenants of ``--small-rows``, interleaved in the table
(tenant by tenant, round robin, so a big tenant's rows are spread over the heap); ANALYZE. Then:

1. **reads**: find by id and every declared list of the spec (each shape of
   ``storage.indexing.declared_lists``, as the statement ``storage.sql`` builds for it), timed on a
   big tenant and on a small one in alternation, several rounds: the big/small ratio of each;
2. **writes**: insert throughput into the table with the derived indexes, and into the same table
   with only what was there before them (primary key, unique, relation and ``index: true`` ones);
3. **online build**: ``--build-rows`` rows in one table while writers insert and update
   continuously; one derived index is built with ``CREATE INDEX CONCURRENTLY``
   (``storage.building``) and, for comparison, with a plain ``CREATE INDEX``: the longest write
   stall during each.

The statements are sent straight to Postgres (asyncpg), not through HTTP: the figures are those of
the queries the indexes serve, not of the web stack. Prints every figure; exits non-zero only when
something fails to run. ``--quick`` shrinks every size to prove the benchmark runs.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dap.config.enums import FilterOp  # noqa: E402
from dap.server.storage import indexing, queries, sql  # noqa: E402
from dap.server.storage.tables import Table, quote  # noqa: E402

EXAMPLE = ROOT / "examples" / "procurement"
VALUES = 7  # distinct values of a text, number or date column (equality filters keep 1/7)


def _value_sql(column: str, sql_type: str, unique: bool) -> str:
    """A SQL expression over ``g.i`` filling ``column`` of ``sql_type`` (few distinct values)."""
    if unique:
        return "'u' || g.i" if sql_type == "text" else "g.i"
    if column == "created_at" or sql_type == "timestamptz":
        return "now() - g.i * interval '1 second'"
    if column == "docstatus":
        return "(g.i % 3)::smallint"
    return {
        "text": f"'v' || (g.i % {VALUES})",
        "uuid": f"('00000000-0000-0000-0000-00000000000' || (g.i % {VALUES}))::uuid",
        "date": "date '2024-01-01' + (g.i % 1000)",
        "boolean": "g.i % 2 = 0",
        "bigint": "g.i % 1000",
        "double precision": "(g.i % 1000)::float8",
        "integer": "g.i % 1000",
        "time": "time '08:00'",
        "jsonb": "NULL",
    }.get(sql_type, f"(g.i % 1000)::{sql_type}" if sql_type.startswith("numeric") else "NULL")


def fill_statement(table: Table) -> str:
    """``INSERT … SELECT`` of rows ``$2 .. $3`` (``generate_series``) for tenant ``$1`` into ``table``."""
    unique = {i.columns[-1] for i in table.indexes if i.unique}
    cols = [c for c in table.columns if c.name not in ("tenant_id", "id", "version", "updated_at")]
    names = ", ".join(quote(c.name) for c in cols)
    values = ", ".join(_value_sql(c.name, c.sql_type, c.name in unique) for c in cols)
    return (
        f"INSERT INTO {quote(table.name)} (tenant_id, {names}) "
        f"SELECT $1::uuid, {values} FROM generate_series($2::int, $3::int) AS g(i)"
    )


def sample_value(sql_type: str) -> Any:
    """A value of ``sql_type`` that :func:`fill_statement` wrote to about 1/7 of the rows."""
    import datetime

    return {
        "text": "v3",
        "uuid": uuid.UUID("00000000-0000-0000-0000-000000000003"),
        "date": datetime.date(2024, 1, 4),
        "boolean": True,
        "bigint": 3,
        "integer": 3,
        "double precision": 3.0,
        "smallint": 1,
        "timestamptz": datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1),
    }.get(sql_type, 3)


def list_queries(shape: indexing.Shape, table: Table) -> list[tuple[str, queries.ListQuery]]:
    """The list queries of ``shape`` as the server would run them: the base list, then one per
    optional equality filter and one per range filter (each with the scope and the sort)."""

    def column(name: str) -> tuple[str, str] | None:
        c = table.column(name) if name in indexing.SYSTEM_COLUMNS else table.column_for(name)
        return (c.name, "smallint" if c.name == "docstatus" else c.sql_type) if c is not None else None

    base: list[queries.Condition] = []
    for name in shape.equal:
        found = column(name)
        if found is not None:
            base.append(queries.Condition(found[0], FilterOp.IN, (sample_value(found[1]),)))
    for name, is_null in shape.nulls:
        found = column(name)
        if found is not None:
            base.append(queries.Condition(found[0], FilterOp.NULL if is_null else FilterOp.NOTNULL, ()))
    sort = [queries.SortKey(c[0], desc) for name, desc in shape.sort if (c := column(name)) is not None]
    if not any(k.column == "id" for k in sort):
        sort.append(queries.SortKey("id", sort[-1].descending if sort else False))
    out = [(shape.source, queries.ListQuery(tuple(base), tuple(sort), 20, 0, False, None))]
    for name in shape.optional:
        found = column(name)
        if found is not None:
            cond = queries.Condition(found[0], FilterOp.EQ, (sample_value(found[1]),))
            out.append(
                (
                    f"{shape.source} ?{name}=",
                    queries.ListQuery((*base, cond), tuple(sort), 20, 0, False, None),
                )
            )
    for name in shape.ranges:
        found = column(name)
        if found is not None:
            cond = queries.Condition(found[0], FilterOp.GTE, (sample_value(found[1]),))
            out.append(
                (
                    f"{shape.source} ?{name}[gte]=",
                    queries.ListQuery((*base, cond), tuple(sort), 20, 0, False, None),
                )
            )
    return out


def statement(table: Table, query: queries.ListQuery, tenant: uuid.UUID) -> tuple[str, list[Any]]:
    return sql.select_list(table, query, tenant, None)
