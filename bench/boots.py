"""The spec whose boot ``bench/rest.py`` measures (``big_spec``: entities of six fields and a
relation each), and the time Postgres alone needs to create its tables (``ddl_seconds``)."""

from __future__ import annotations

import time
from pathlib import Path

import asyncpg


def big_spec(directory: Path, entities: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    docs = ["apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: big}\nspec: {title: Big}\n"]
    for i in range(entities):
        docs.append(f"""apiVersion: dap.io/v1
kind: Entity
metadata: {{name: e{i:03d}, module: big}}
spec:
  fields:
    - {{name: code, type: string, unique: true}}
    - {{name: title, type: string}}
    - {{name: amount, type: money}}
    - {{name: qty, type: integer}}
    - {{name: day, type: date}}
    - {{name: owner_ref, type: relation, relation: {{entity: big/e000}}}}
  expose:
    - type: rest
""")
    (directory / "big.yaml").write_text("---\n".join(docs))


async def ddl_seconds(dsn: str, spec_dir: Path) -> float:
    """Time Postgres needs to create the spec's tables and indexes from plain DDL, once, in the
    empty database ``dsn``."""
    from dap import config
    from dap.server.catalog import Catalog
    from dap.server.storage import migrations

    catalog = Catalog.from_spec(config.load_spec(spec_dir))
    plan = migrations.plan({}, catalog.tables, catalog.entities)
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        async with conn.transaction():
            for step in plan.steps:
                for statement in step.statements:
                    await conn.execute(statement)
        return time.perf_counter() - started
    finally:
        await conn.close()


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/boots.py: the boot spec of bench/rest.py; nothing to run alone")
