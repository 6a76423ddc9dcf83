"""The boot path: Postgres creates the tables while the manifests' schema pass and the web imports run.

``dap serve`` stages the spec (documents built, cross-checked), sends the schema change, and
confirms the spec during it; the change commits only after the confirmation. These tests pin
both halves: an invalid spec refuses the boot and leaves no table behind, and reaching Postgres
does not need the web stack.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from dap.server import booting, cli, errors

from .conftest import serve_options

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: inv}\nspec: {title: Inventory}\n"
ENTITY = """apiVersion: dap.io/v1
kind: Entity
metadata: {name: thing, module: inv}
spec:
  fields:
    - {name: title, type: string}
    - {name: qty, type: decimal, precision: %s}
  expose:
    - type: rest
"""


def _spec(tmp_path: Path, precision: str) -> Path:
    (tmp_path / "module.yaml").write_text(MODULE)
    (tmp_path / "thing.yaml").write_text(ENTITY % precision)
    return tmp_path


def test_reaching_postgres_does_not_import_the_web_stack() -> None:
    code = (
        "import sys, dap.cli, dap.server.cli, dap.server.booting\n"
        "heavy = [m for m in ('aiohttp', 'jwt', 'jsonschema', 'prometheus_client') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


async def test_a_spec_refused_during_the_schema_change_leaves_no_table(pg_dsn: str, tmp_path: Path) -> None:
    # "12" (a string) passes the models, which coerce it, but not the JSON Schema: only the
    # confirmation, which runs while Postgres creates the table, finds it
    staged = cli.stage_catalog(_spec(tmp_path, "'12'"))

    async def confirm() -> None:
        cli.confirm_spec(staged.spec, tmp_path)

    with pytest.raises(errors.BootRefused, match="are invalid"):
        await booting.open_database(serve_options(pg_dsn), staged.catalog, confirm=confirm)
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT to_regclass('inv__thing')") is None
        assert await conn.fetchval("SELECT count(*) FROM dap.schema_registry") == 0
    finally:
        await conn.close()


async def test_a_confirmed_spec_commits_its_tables(pg_dsn: str, tmp_path: Path) -> None:
    staged = cli.stage_catalog(_spec(tmp_path, "12"))

    async def confirm() -> None:
        cli.confirm_spec(staged.spec, tmp_path)

    pool = await booting.open_database(serve_options(pg_dsn), staged.catalog, confirm=confirm)
    try:
        assert await pool.fetchval("SELECT to_regclass('inv__thing')::text") == "inv__thing"
    finally:
        await pool.close()


async def test_a_second_boot_never_waits_on_a_busy_platform_table(pg_dsn: str, tmp_path: Path) -> None:
    """A new process booting beside a running one must not queue behind its open transactions:
    the platform DDL (``ALTER TABLE``, ``CREATE INDEX``: the table's strongest locks) runs only
    when its text changed, so an open write on the outbox and the audit log does not stall it."""
    catalog = cli.stage_catalog(_spec(tmp_path, "12")).catalog
    first = await booting.open_database(serve_options(pg_dsn), catalog)
    await first.close()
    busy = await asyncpg.connect(pg_dsn)
    try:
        async with busy.transaction():
            tenant = await busy.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
            await busy.execute(
                "INSERT INTO dap.outbox (tenant_id, entity, action, event, payload) "
                "VALUES ($1, 'inv/thing', 'create', 'created', '{}')",
                tenant,
            )
            await busy.execute(
                "INSERT INTO dap.audit_log (tenant_id, entity, record_id, action, actor_sub, "
                "actor_username, changes) "
                "VALUES ($1, 'inv/thing', gen_random_uuid(), 'create', 'u', 'u', '{}')",
                tenant,
            )
            second = await asyncio.wait_for(booting.open_database(serve_options(pg_dsn), catalog), 20)
            await second.close()
    finally:
        await busy.close()


def test_staging_refuses_what_the_models_refuse(tmp_path: Path) -> None:
    with pytest.raises(errors.BootRefused, match="are invalid"):
        cli.stage_catalog(_spec(tmp_path, "many"))
