"""Tables from entities, the pure migration planner, and applying plans on real Postgres."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from dap.config.entities import EntitySpec
from dap.server import errors
from dap.server.storage import migrations, schema_sync, tables
from dap.server.storage.migrations import Safety


def spec(*fields: dict[str, Any], lifecycle: bool = False) -> EntitySpec:
    return EntitySpec.model_validate({"lifecycle": lifecycle, "fields": list(fields)})


def test_identifier_shortening_is_deterministic_and_fits() -> None:
    long = "m" * 40 + "__" + "e" * 40
    short = tables.ident(long)
    assert len(short.encode()) <= 63
    assert short == tables.ident(long)
    assert short != tables.ident(long + "x")
    assert tables.ident("short_name") == "short_name"


def test_table_layout() -> None:
    entities = {
        "m/doc": spec(
            {"name": "code", "type": "string", "unique": True},
            {"name": "amount", "type": "money"},
            {"name": "ref", "type": "relation", "relation": {"entity": "m/doc"}},
            {
                "name": "rows",
                "type": "child",
                "child": {"storage": "table", "fields": [{"name": "x", "type": "integer"}]},
            },
            {
                "name": "items",
                "type": "child",
                "child": {"storage": "jsonb", "fields": [{"name": "y", "type": "integer"}]},
            },
            lifecycle=True,
        ),
        "m/ext": EntitySpec.model_validate(
            {"extends": {"target": "m/doc", "namespace": "extra"}, "fields": []}
        ),
    }
    main, child = tables.all_tables(entities)
    assert main.name == "m__doc" and main.primary_key == ("tenant_id", "id")
    cols = {c.name: c.sql_type for c in main.columns}
    assert cols["amount"] == "numeric(19,2)" and cols["ref"] == "uuid" and cols["items"] == "jsonb"
    assert cols["ext_extra"] == "jsonb"
    assert {
        "tenant_id",
        "id",
        "version",
        "docstatus",
        "created_at",
        "updated_at",
        "created_by",
        "owner",
    } <= set(cols)
    assert "rows" not in cols
    assert all(i.columns[0] == "tenant_id" for i in main.indexes)
    assert next(i for i in main.indexes if i.unique).columns == ("tenant_id", "code")
    assert child.name == "m__doc__rows" and child.primary_key == ("tenant_id", "parent_id", "idx")


def test_long_names_are_shortened_and_recorded() -> None:
    entities = {
        "module_with_a_long_name/entity_with_an_even_longer_name_for_testing": spec(
            {
                "name": "a_field_whose_name_is_long_enough_to_push_the_index_name_over",
                "type": "string",
                "index": True,
            }
        )
    }
    (table,) = tables.all_tables(entities)
    assert len(table.name) <= 63 and table.full_name in table.aliases
    assert all(len(i.name) <= 63 for i in table.indexes)


def _plan(before: dict[str, EntitySpec], after: dict[str, EntitySpec]) -> migrations.Plan:
    registry = {t.name: t for t in tables.all_tables(before)}
    return migrations.plan(registry, tables.all_tables(after), after)


BASE = {"name": "a", "type": "string"}


@pytest.mark.parametrize(
    ("before", "after", "kinds", "safety", "blocked"),
    [
        pytest.param(None, [BASE], ["create_table"], Safety.SAFE, False, id="create-table"),
        pytest.param(
            [BASE],
            [BASE, {"name": "b", "type": "integer"}],
            ["add_column"],
            Safety.SAFE,
            False,
            id="add-column",
        ),
        pytest.param([BASE], [{**BASE, "index": True}], ["create_index"], Safety.SAFE, False, id="add-index"),
        pytest.param([{**BASE, "index": True}], [BASE], ["drop_index"], Safety.SAFE, False, id="drop-index"),
        pytest.param(
            [{"name": "a", "type": "decimal", "precision": 10, "scale": 2}],
            [{"name": "a", "type": "decimal", "precision": 14, "scale": 3}],
            ["alter_type"],
            Safety.SAFE,
            False,
            id="widen-numeric",
        ),
        pytest.param(
            [{"name": "a", "type": "integer"}],
            [{"name": "a", "type": "string"}],
            ["alter_type"],
            Safety.SAFE,
            False,
            id="widen-to-text",
        ),
        pytest.param(
            [{"name": "a", "type": "date"}],
            [{"name": "a", "type": "datetime"}],
            ["alter_type"],
            Safety.SAFE,
            False,
            id="date-to-datetime",
        ),
        pytest.param(
            [BASE],
            [{"name": "b", "type": "string", "renamed_from": "a", "reason": "clearer"}],
            ["rename_column"],
            Safety.DESTRUCTIVE,
            False,
            id="rename",
        ),
        pytest.param(
            [BASE, {"name": "b", "type": "string"}],
            [BASE, {"name": "b", "type": "string", "removed": True, "reason": "unused"}],
            ["drop_column"],
            Safety.DESTRUCTIVE,
            False,
            id="drop-declared",
        ),
        pytest.param([BASE, {"name": "b", "type": "string"}], [BASE], [], None, True, id="drop-undeclared"),
        pytest.param(
            [{"name": "a", "type": "string"}],
            [{"name": "a", "type": "integer"}],
            [],
            None,
            True,
            id="narrow-undeclared",
        ),
        pytest.param(
            [{"name": "a", "type": "decimal", "precision": 10, "scale": 2}],
            [{"name": "a", "type": "decimal", "precision": 10, "scale": 0}],
            [],
            None,
            True,
            id="lose-scale-undeclared",
        ),
        pytest.param(
            [{"name": "a", "type": "string"}],
            [{"name": "a", "type": "integer", "accept_data_loss": True, "reason": "codes are numbers"}],
            ["alter_type"],
            Safety.DESTRUCTIVE,
            False,
            id="narrow-declared",
        ),
        pytest.param(
            [{"name": "a", "type": "string"}],
            [{"name": "a", "type": "integer", "accept_data_loss": True}],
            [],
            None,
            True,
            id="data-loss-without-reason",
        ),
        pytest.param([BASE], [BASE], [], None, False, id="unchanged"),
    ],
)
def test_planner_classifies(
    before: Any, after: Any, kinds: list[str], safety: Safety | None, blocked: bool
) -> None:
    old = {} if before is None else {"m/e": spec(*before)}
    plan = _plan(old, {"m/e": spec(*after)})
    assert [s.kind for s in plan.steps] == kinds
    assert bool(plan.blockers) is blocked
    if safety is not None:
        assert {s.safety for s in plan.steps} == {safety}


def test_destructive_steps_carry_their_reason() -> None:
    plan = _plan(
        {"m/e": spec(BASE)},
        {"m/e": spec({"name": "b", "type": "string", "renamed_from": "a", "reason": "clearer"})},
    )
    assert plan.steps[0].reason == "clearer"
    assert "destructive" in plan.render()


def test_dropped_entity_is_left_in_place() -> None:
    plan = _plan({"m/e": spec(BASE)}, {})
    assert plan.steps == () and plan.blockers == () and "left in place" in plan.notes[0]


# --- on Postgres ------------------------------------------------------------------------------


async def _sync(conn: asyncpg.Connection, entities: dict[str, EntitySpec], **kw: Any) -> migrations.Plan:
    return await schema_sync.sync(conn, tables.all_tables(entities), entities, **kw)


async def test_apply_refuse_and_migrate(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        v1 = {"m/e": spec(BASE, {"name": "b", "type": "integer"}, {"name": "c", "type": "string"})}
        plan = await _sync(conn, v1)
        assert [s.kind for s in plan.steps] == ["create_table"]
        tenant = "00000000-0000-0000-0000-000000000001"
        await conn.execute("INSERT INTO m__e (tenant_id, a, b, c) VALUES ($1, 'x', 7, 'keep')", tenant)

        # rename b -> d and drop c, both declared: boot (no destructive allowed) refuses, nothing changes
        v2 = {
            "m/e": spec(
                BASE,
                {"name": "d", "type": "integer", "renamed_from": "b", "reason": "r1"},
                {"name": "c", "type": "string", "removed": True, "reason": "r2"},
            )
        }
        with pytest.raises(errors.DestructivePending, match="dap migrate"):
            await _sync(conn, v2)
        assert await conn.fetchval("SELECT b FROM m__e") == 7

        # undeclared: refused even for migrate
        with pytest.raises(errors.DestructivePending, match="removed: true"):
            await _sync(conn, {"m/e": spec(BASE)}, allow_destructive=True)
        assert await conn.fetchval("SELECT c FROM m__e") == "keep"

        plan = await _sync(conn, v2, allow_destructive=True)
        assert {s.kind for s in plan.steps} == {"rename_column", "drop_column"}
        assert await conn.fetchval("SELECT d FROM m__e") == 7
        cols = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'm__e'"
            )
        }
        assert "c" not in cols and "b" not in cols
        recorded = await conn.fetch("SELECT kind, safety, reason FROM dap.schema_migrations ORDER BY id")
        assert [(r["kind"], r["safety"], r["reason"]) for r in recorded][-2:] == [
            ("rename_column", "destructive", "r1"),
            ("drop_column", "destructive", "r2"),
        ]

        # a second boot with the same manifests has nothing to do
        assert (await _sync(conn, v2)).steps == ()
        # a failing step rolls everything back
        v3 = {
            "m/e": spec(
                {**BASE, "unique": True}, {"name": "d", "type": "integer"}, {"name": "z", "type": "string"}
            )
        }
        await conn.execute("INSERT INTO m__e (tenant_id, a) VALUES ($1, 'x')", tenant)
        with pytest.raises(errors.MigrationError, match="nothing was changed"):
            await _sync(conn, v3)
        cols = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'm__e'"
            )
        }
        assert "z" not in cols
    finally:
        await conn.close()
