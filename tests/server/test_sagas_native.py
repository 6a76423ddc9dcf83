"""Sagas of native and record steps: each step's writes commit with the saga's progress row, a
failed step undoes the earlier ones in reverse (the record deleted, the native write removed), and
a native handler sees the step's idempotency key. Real Postgres, real HTTP, a real installed
distribution registering the handlers (entry points)."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from .conftest import Running, load, running
from .documents_spec import JSON

pytestmark = pytest.mark.asyncio(loop_scope="module")

HANDLERS = """
async def stamp(ctx):
    key, title = ctx.idempotency_key, ctx.params["title"]
    await ctx.conn.execute("INSERT INTO public.saga_stamps (key, title) VALUES ($1, $2)", key, title)
    return {"key": ctx.idempotency_key}


async def unstamp(ctx):
    done = ctx.idempotency_key[: -len("-undo")]  # the forward step's key
    await ctx.conn.execute("DELETE FROM public.saga_stamps WHERE key = $1", done)


async def check(ctx):
    if ctx.params.get("fail"):
        raise RuntimeError("the check refused it")
    return "checked"
"""

SPEC = {
    "desk/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: desk}\nspec: {title: Desk}\n",
    "desk/note.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: desk}
spec:
  fields: [{name: title, type: string, required: true}]
  expose: [{type: rest}]
""",
    "desk/ops.yaml": """
apiVersion: dap.io/v1
kind: Service
metadata: {name: ops, module: desk}
spec:
  expose: [{type: rest}]
  actions:
    - name: file
      call: async
      track: true
      params:
        fields:
          - {name: title, type: string, required: true}
          - {name: fail, type: boolean}
      impl:
        type: saga
        steps:
          - name: note
            record: {entity: desk/note, op: create, values: {title: title}}
            compensation: {record: {entity: desk/note, op: delete, of: note}}
          - {name: stamp, native: saga-test-stamp, compensation: {native: saga-test-unstamp}}
          - {name: check, native: saga-test-check, compensation: none, retries: 0}
""",
}


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root: Path = tmp_path_factory.mktemp("saga-handlers")
    (root / "saga_test_handlers.py").write_text(HANDLERS)
    info = root / "saga_test_handlers-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: saga-test-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dap.actions]\n"
        "saga-test-stamp = saga_test_handlers:stamp\n"
        "saga-test-unstamp = saga_test_handlers:unstamp\n"
        "saga-test-check = saga_test_handlers:check\n"
    )
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Running]:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("CREATE TABLE IF NOT EXISTS public.saga_stamps (key text PRIMARY KEY, title text)")
    await conn.close()
    async with running(pg_dsn, load(SPEC), pool_size=6) as r:
        yield r


async def file(srv: Running, body: dict[str, Any]) -> dict[str, Any]:
    headers = {**srv.auth(), **JSON}
    async with srv.http.post(f"{srv.api}/default/api/desk/ops/file", json=body, headers=headers) as resp:
        assert resp.status == 202, await resp.text()
        saga_id = (await resp.json())["data"]["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        async with srv.http.get(f"{srv.api}/default/api/_sagas/{saga_id}", headers=headers) as resp:
            if resp.status == 200:
                found: dict[str, Any] = (await resp.json())["data"]
                if found["state"] not in ("running", "compensating"):
                    return found
        await asyncio.sleep(0.05)
    raise AssertionError("the saga never ended")


async def test_record_and_native_steps_commit_with_the_saga_and_are_compensated(
    srv: Running, pg_dsn: str
) -> None:
    done = await file(srv, {"title": "kept"})
    assert done["state"] == "completed", done
    note_id = uuid.UUID(done["results"]["note"]["id"])
    assert done["results"]["stamp"] == {"key": f"saga-{done['id']}-stamp"}
    undone = await file(srv, {"title": "undone", "fail": True})
    assert undone["state"] == "compensated", undone
    assert [(t["name"], t["phase"], t["outcome"]) for t in undone["timeline"] if t["phase"] == "undo"] == [
        ("stamp", "undo", "done"),
        ("note", "undo", "done"),
    ]
    async with srv.http.get(f"{srv.api}/default/api/desk/note", headers=srv.auth()) as resp:
        notes = [(n["id"], n["title"]) for n in (await resp.json())["data"]]
    conn = await asyncpg.connect(pg_dsn)
    try:
        stamps = [r["title"] for r in await conn.fetch("SELECT title FROM public.saga_stamps ORDER BY title")]
    finally:
        await conn.close()
    assert notes == [(str(note_id), "kept")] and stamps == ["kept"]
