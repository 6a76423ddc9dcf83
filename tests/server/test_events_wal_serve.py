"""Events as WAL messages through the command users run: a spawned ``dap serve`` with
``DAP_EVENTS_SOURCE=wal`` streams its slot through a walsender and settles a sync event before
answering the create (``Event-Delivery: settled``), its feed row written by the dispatcher."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import urllib.request
import uuid
from pathlib import Path

import asyncpg
import pytest

from .conftest import ORIGIN, SECRET, token
from .test_serve_cli import DAP, _port, _wait_banner

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: inv}\nspec: {title: Inventory}\n"
ENTITY = """apiVersion: dap.io/v1
kind: Entity
metadata: {name: thing, module: inv}
spec:
  fields:
    - {name: label, type: string}
  events:
    - name: created
      deliver:
        - {channel: audit_log}
  expose:
    - type: rest
"""


async def _fetch(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


@pytest.mark.slow
def test_dap_serve_settles_a_sync_event_read_from_its_walsender_stream(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "module.yaml").write_text(MODULE)
    (spec / "thing.yaml").write_text(ENTITY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    env.update(
        {"DAP_DSN": pg_dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": ORIGIN, "DAP_EVENTS_SOURCE": "wal"}
    )
    port = _port()
    proc = subprocess.Popen(
        [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        _wait_banner(proc)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/default/api/inv/thing",
            data=json.dumps({"label": "streamed"}).encode(),
            headers={"Authorization": f"Bearer {token()}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 201
            # ``created`` is sync by its name: answered once the dispatcher settled it
            assert resp.headers["Event-Delivery"] == "settled"
            rid = uuid.UUID(json.loads(resp.read())["data"]["id"])
        streaming = asyncio.run(
            _fetch(
                pg_dsn,
                "SELECT r.active, s.pid IS NOT NULL AS walsender FROM pg_replication_slots r "
                "LEFT JOIN pg_stat_replication s ON s.pid = r.active_pid "
                "WHERE r.database = current_database()",
            )
        )
        assert [(r["active"], r["walsender"]) for r in streaming] == [(True, True)]  # read by a stream
        feed = asyncio.run(
            _fetch(pg_dsn, "SELECT event, delivered_at FROM dap.outbox WHERE record_id = $1", rid)
        )
        assert [r["event"] for r in feed] == ["created"] and feed[0]["delivered_at"] is not None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
