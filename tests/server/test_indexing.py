"""Derived indexes (issue 48): the rules as a table, and EXPLAIN on a real Postgres proving that
every declared list of the example spec runs on its index at a big tenant."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from click.testing import CliRunner

from bench import indexes as bench
from dap.cli import main
from dap.config.apps import KanbanSpec, ListingSpec, TableSpec
from dap.config.entities import EntitySpec
from dap.server import booting
from dap.server.catalog import Catalog
from dap.server.cli import load_catalog
from dap.server.storage import db, indexing, tables

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "procurement"

SHIP = {
    "fields": [
        {"name": "code", "type": "string", "unique": True},
        {"name": "captain", "type": "string"},
        {"name": "berth", "type": "integer"},
        {"name": "port", "type": "string", "index": True},
        {"name": "cargo", "type": "json"},
        {"name": "retired_at", "type": "date"},
        {"name": "owner_team", "type": "string"},
    ]
}


def _derive(
    views: list[tuple[str, Any]], ship: dict[str, Any] | None = None
) -> tuple[dict[tuple[tuple[str, ...], tuple[bool, ...], str | None], indexing.Derived], indexing.Derivation]:
    entities = {"sea/ship": EntitySpec.model_validate(ship or SHIP)}
    derivation = indexing.derive(
        tables.all_tables(entities), entities, indexing.declared_lists(entities, views)
    )
    found = {(d.index.columns, d.index.descending, d.index.where): d for d in derivation.indexes}
    return found, derivation


def _table(**spec: Any) -> TableSpec:
    return TableSpec.model_validate({"entity": "sea/ship", **spec})


@pytest.mark.parametrize(
    ("views", "expected"),
    [
        pytest.param(  # the list: ?captain=c3&berth[gte]=10&sort=-berth
            [
                (
                    "sea/t",
                    _table(
                        filters=[
                            {"field": "captain", "type": "select"},
                            {"field": "berth", "type": "date_range"},
                        ],
                        sort="-berth",
                    ),
                )
            ],
            {("tenant_id", "berth", "id"), ("tenant_id", "captain", "berth", "id")},
            id="equality-then-sort",
        ),
        pytest.param(  # no sort declared: the REST default -created_at, id
            [("sea/t", _table())],
            {("tenant_id", "created_at", "id")},
            id="default-sort",
        ),
        pytest.param(  # fixed filters are equalities of every query of the list
            [("sea/t", _table(fixed_filters=[{"field": "captain", "value": "c1"}], sort="berth"))],
            {("tenant_id", "captain", "berth", "id")},
            id="fixed-filter",
        ),
        pytest.param(  # a kanban's column value is an equality
            [("sea/k", KanbanSpec.model_validate({"entity": "sea/ship", "group_by": "captain"}))],
            {("tenant_id", "captain", "created_at", "id")},
            id="kanban",
        ),
        pytest.param(  # a range on another column than the sort: its own index
            [
                (
                    "sea/l",
                    ListingSpec.model_validate(
                        {"entity": "sea/ship", "filters": [{"field": "retired_at", "type": "date_range"}]}
                    ),
                )
            ],
            {("tenant_id", "created_at", "id"), ("tenant_id", "retired_at")},
            id="range-elsewhere",
        ),
        pytest.param(  # sorted by a unique column: the unique index serves it (no ties to break)
            [("sea/t", _table(sort="code"))],
            set(),
            id="unique-sort",
        ),
        pytest.param(  # two lists needing a prefix of one another: the longer serves both
            [
                ("sea/t", _table(sort="captain,berth")),
                ("sea/u", _table(filters=[{"field": "captain", "op": "gte", "type": "select"}], sort="code")),
            ],
            {("tenant_id", "captain", "berth", "id")},
            id="prefix-dedup",
        ),
    ],
)
def test_derivation_rules(views: list[tuple[str, Any]], expected: set[tuple[str, ...]]) -> None:
    found, _ = _derive(views)
    derived = {cols for (cols, _, _), d in found.items() if d.origin == "derived"}
    assert derived == expected
    assert {cols for (cols, _, _), d in found.items() if d.origin == "unique"} == {("tenant_id", "code")}


def test_a_table_without_filters_gets_the_entity_filters() -> None:
    # the UI offers the entity's own filters on a Table that declares none (ui/src/views/table.ts)
    ship = {**SHIP, "filters": [{"field": "captain", "type": "select"}]}
    found, _ = _derive([("sea/t", _table(sort="berth"))], ship)
    assert found[(("tenant_id", "captain", "berth", "id"), (), None)].serves == ("table sea/t",)


def test_directions_are_kept_relative_to_the_first_sort_key() -> None:
    found, _ = _derive([("sea/t", _table(sort="-berth,captain"))])
    (key,) = [k for k, d in found.items() if d.origin == "derived"]
    # read backwards for -berth,captain: berth ASC, captain DESC, id DESC
    assert key[:2] == (("tenant_id", "berth", "captain", "id"), (False, False, True, True))


def test_row_scope_leads_and_all_rows_callers_get_the_sort_index() -> None:
    ship = {
        **SHIP,
        "assignments": [{"dimension": "team", "field": "owner_team", "principal_field": "team"}],
        "fixed_filters": [{"field": "retired_at", "op": "null"}],
    }
    found, derivation = _derive(
        [("sea/t", _table(filters=[{"field": "captain", "type": "select"}], sort="berth"))], ship
    )
    where = '"retired_at" IS NULL'
    scoped = found[(("tenant_id", "owner_team", "captain", "berth", "id"), (), where)]
    assert scoped.serves == ("table sea/t",) and scoped.index.where == where
    assert (("tenant_id", "owner_team", "berth", "id"), (), where) in found
    # a caller holding the all-rows permission lists without scope (nor its constants)
    assert found[(("tenant_id", "berth", "id"), (), None)].serves == ("table sea/t (all rows)",)
    assert not derivation.warnings


def test_without_a_partial_predicate_the_row_scope_trails_and_one_index_serves_both_views() -> None:
    ship = {**SHIP, "assignments": [{"dimension": "team", "field": "owner_team", "principal_field": "team"}]}
    found, derivation = _derive([("sea/t", _table(sort="berth"))], ship)
    derived = {k: d for k, d in found.items() if d.origin == "derived"}
    # read in berth order, the scope checked in the index; the all-rows view reads its prefix
    assert list(derived) == [(("tenant_id", "berth", "id", "owner_team"), (), None)]
    assert set(derived[(("tenant_id", "berth", "id", "owner_team"), (), None)].serves) == {
        "table sea/t",
        "table sea/t (all rows)",
    }
    assert not derivation.warnings


def test_a_filter_on_a_few_declared_values_trails_the_sort_instead_of_an_index_of_its_own() -> None:
    ship = {
        **SHIP,
        "fields": [
            *SHIP["fields"],
            {"name": "active", "type": "boolean"},
            {"name": "kind", "type": "enum", "options": [{"value": "tug"}, {"value": "ferry"}]},
        ],
    }
    filters = [{"field": f, "type": "select"} for f in ("active", "kind", "captain")]
    found, _ = _derive([("sea/t", _table(filters=filters, sort="berth"))], ship)
    derived = {cols for (cols, _, _), d in found.items() if d.origin == "derived"}
    assert derived == {
        ("tenant_id", "berth", "id", "active", "kind"),
        # captain is an open set of values: a rare one would walk the tenant's index, so its own
        ("tenant_id", "captain", "berth", "id", "active", "kind"),
    }


def test_declared_index_stays_unless_a_longer_one_serves_it_and_json_and_text_are_reported() -> None:
    found, derivation = _derive(
        [
            (
                "sea/t",
                _table(filters=[{"field": "cargo", "type": "select"}, {"field": "captain"}], sort="cargo"),
            )
        ]
    )
    assert found[(("tenant_id", "port"), (), None)].origin == "declared"
    said = "\n".join(derivation.warnings)
    assert "filter 'cargo' is served by no index: cargo is stored as JSON" in said
    assert "sort 'cargo' is served by no index" in said
    assert "filter 'captain' is served by no index (a text filter is a substring match" in said
    found, _ = _derive([("sea/k", KanbanSpec.model_validate({"entity": "sea/ship", "group_by": "port"}))])
    assert (("tenant_id", "port"), (), None) not in found  # served by (tenant_id, port, created_at, id)
    assert found[(("tenant_id", "port", "created_at", "id"), (), None)].serves == ("kanban sea/k",)


def test_schema_indexes_and_validate_warnings() -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["schema", "--indexes", str(EXAMPLE)])
    assert shown.exit_code == 0, shown.output
    assert "buying__purchase_order__order_date__id__buyer__docstatus__idx" in shown.output
    assert "serves table buying/purchase_orders" in shown.output
    checked = runner.invoke(main, ["validate", str(EXAMPLE)])
    assert checked.exit_code == 0, checked.output
    assert "warning: table buying/suppliers: filter 'name' is served by no index" in checked.output


# --- EXPLAIN at a big tenant ---------------------------------------------------------------

BIG, SMALL = uuid.UUID(int=1), uuid.UUID(int=2)
ROWS = 20_000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def filled(pg_dsn: str) -> AsyncIterator[tuple[asyncpg.Pool, Catalog]]:
    catalog = load_catalog(EXAMPLE)
    pool = await db.open_pool(pg_dsn, 2)
    try:
        await booting.prepare_database(pool, catalog)
        async with pool.acquire() as conn:
            for t in catalog.tables:
                if t.kind != "entity":
                    continue
                await conn.execute(bench.fill_statement(t), BIG, 1, ROWS)
                await conn.execute(bench.fill_statement(t), SMALL, ROWS + 1, ROWS + 10)
                await conn.execute(f"ANALYZE {tables.quote(t.name)}")
        yield pool, catalog
    finally:
        await pool.close()


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


async def _plan(conn: asyncpg.Connection, statement: str, args: list[Any]) -> list[dict[str, Any]]:
    raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args)
    found = json.loads(raw) if isinstance(raw, str) else raw  # the pool decodes json itself
    return _nodes(found[0]["Plan"])


def _cases(catalog: Catalog) -> list[tuple[str, Any, Any, set[str]]]:
    shapes = indexing.declared_lists(catalog.entities, [*catalog.views.items(), *catalog.ui_parts.items()])
    mains = {t.entity: t for t in catalog.tables if t.kind == "entity"}
    out = []
    for shape in shapes:
        table = mains[shape.entity]
        serving = {d.index.name for d in catalog.indexes.of(table.name) if shape.source in d.serves}
        scope = {c.name for name in shape.scope if (c := table.column_for(name)) is not None}
        for label, query in bench.list_queries(shape, table):
            out.append((label, table, query, serving, scope))
    return out


@pytest.mark.asyncio(loop_scope="module")
async def test_every_declared_list_runs_on_its_index_at_a_big_tenant(
    filled: tuple[asyncpg.Pool, Catalog],
) -> None:
    pool, catalog = filled
    cases = _cases(catalog)
    assert len(cases) >= 10
    async with pool.acquire() as conn:
        for label, table, query, serving, scope in cases:
            assert serving, f"{label}: no derived index serves it"
            nodes = await _plan(conn, *bench.statement(table, query, BIG))
            used = {n.get("Index Name") for n in nodes} - {None}
            kinds = [n["Node Type"] for n in nodes]
            assert used & serving, f"{label}: ran on {used or kinds}, not on {serving}"
            if "?" in label:  # a filter's own index: the one that has its column
                column = table.column_for(label.split("?")[1].split("=")[0].split("[")[0])
                column_name = column.name if column is not None else label.split("?")[1].split("=")[0]
                columns = {d.index.name: d.index.columns for d in catalog.indexes.of(table.name)}
                assert any(column_name in columns[name] for name in used & serving), (label, used)
            assert "Seq Scan" not in kinds and "Bitmap Heap Scan" not in kinds, (label, kinds)
            indexes = [d.index for d in catalog.indexes.of(table.name) if d.index.name in used]
            columns = {c for index in indexes for c in index.columns}
            assert scope <= columns, f"{label}: the row scope {scope} is checked on the rows, not in an index"
            if "[gte]" not in label or label.endswith("order_date[gte]="):  # a range on the sort column
                assert "Sort" not in kinds, (
                    f"{label}: sorted {ROWS} rows instead of reading the index in order"
                )


@pytest.mark.asyncio(loop_scope="module")
async def test_a_list_that_loses_its_index_is_sorted(filled: tuple[asyncpg.Pool, Catalog]) -> None:
    # the check above can fail: without its index, the kanban's list reads and sorts the rows
    pool, catalog = filled
    kanban = "kanban buying/orders_by_state"
    label, table, query, serving, _ = next(c for c in _cases(catalog) if c[0] == kanban)
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            for name in serving:
                await conn.execute(f"DROP INDEX {tables.quote(name)}")
            nodes = await _plan(conn, *bench.statement(table, query, BIG))
        finally:
            await tx.rollback()  # the indexes come back for the other tests
    kinds = {n["Node Type"] for n in nodes}
    assert {"Sort", "Incremental Sort"} & kinds or not ({n.get("Index Name") for n in nodes} & serving), label


@pytest.mark.asyncio(loop_scope="module")
async def test_the_engine_indexes_shown_exist(filled: tuple[asyncpg.Pool, Catalog]) -> None:
    pool, _ = filled
    found = {
        (r["schemaname"] + "." + r["tablename"], r["indexname"])
        for r in await pool.fetch(
            "SELECT schemaname, tablename, indexname FROM pg_indexes WHERE schemaname = 'dap'"
        )
    }
    assert {(table, index) for table, index, _ in indexing.ENGINE} <= found
