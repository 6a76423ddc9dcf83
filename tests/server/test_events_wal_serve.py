"""Events as WAL messages through the command users run: a spawned ``dap serve`` with
``DAP_EVENTS_SOURCE=wal`` streams its slot through a walsender and settles a sync event before
answering the create (``Event-Delivery: settled``), its feed row written by the dispatcher; the
messages of a create and an update carry the record each answer shows (the statement writes it
from the row: ``events.builtin._messaged``)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from .conftest import token
from .test_serve_cli import _port, _serve, _wait_banner

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


def _send(method: str, url: str, body: dict[str, str]) -> tuple[int, Any, dict[str, Any]]:
    """A REST write as a user sends it: its status, headers and ``data``."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token()}", "Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return resp.status, resp.headers, json.loads(resp.read())["data"]


@pytest.mark.slow
def test_dap_serve_settles_a_sync_event_read_from_its_walsender_stream(pg_dsn: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "module.yaml").write_text(MODULE)
    (spec / "thing.yaml").write_text(ENTITY)
    port = _port()
    proc = _serve(spec, pg_dsn, port, DAP_EVENTS_SOURCE="wal")
    try:
        _wait_banner(proc)
        base = f"http://127.0.0.1:{port}/default/api/inv/thing"
        status, headers, created = _send("POST", base, {"label": "streamed"})
        assert status == 201
        # ``created`` is sync by its name: answered once the dispatcher settled it
        assert headers["Event-Delivery"] == "settled"
        rid = uuid.UUID(created["id"])
        status, _, updated = _send("PATCH", f"{base}/{rid}", {"label": "streamed again"})
        assert status == 200
        streaming = asyncio.run(
            _fetch(
                pg_dsn,
                "SELECT r.active, s.pid IS NOT NULL AS walsender FROM pg_replication_slots r "
                "LEFT JOIN pg_stat_replication s ON s.pid = r.active_pid "
                "WHERE r.database = current_database()",
            )
        )
        assert [(r["active"], r["walsender"]) for r in streaming] == [(True, True)]  # read by a stream
        feed: list[asyncpg.Record] = []
        deadline = time.monotonic() + 30
        while len(feed) < 2 and time.monotonic() < deadline:  # ``updated`` is not sync: delivered soon
            feed = asyncio.run(
                _fetch(pg_dsn, "SELECT * FROM dap.outbox WHERE record_id = $1 ORDER BY seq", rid)
            )
            time.sleep(0.1)
        assert [r["event"] for r in feed] == ["created", "updated"]
        assert all(r["delivered_at"] is not None for r in feed)
        assert [json.loads(r["payload"])["record"] for r in feed] == [created, updated]
        assert [r["version"] for r in feed] == [created["version"], updated["version"]]
        assert len({r["public_id"] for r in feed}) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
