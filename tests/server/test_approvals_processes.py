"""Approvals across real ``dap serve`` processes on one Postgres: the quorum race on two servers,
and an escalation that fires exactly once across a ``kill -9`` and a restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from .conftest import token
from .test_approvals import AP
from .test_serve_cli import _port, _serve, _wait_banner

ROUNDS = int(os.environ.get("DAP_APPROVAL_RACE_ROUNDS", "200"))
VOTERS = 20
QUORUM = 3


def _spec(root: Path) -> Path:
    spec = root / "spec"
    for name, text in AP.items():
        (spec / name).parent.mkdir(parents=True, exist_ok=True)
        (spec / name).write_text(text)
    return spec


class Served:
    """One ``dap serve`` subprocess on a loopback port."""

    def __init__(self, spec: Path, dsn: str) -> None:
        self.port = _port()
        self.proc = _serve(spec, dsn, self.port)
        _wait_banner(self.proc)
        self.base = f"http://127.0.0.1:{self.port}/default/api"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return _spec(tmp_path)


def _hdrs(name: str, *roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub=f'u-{name}', username=name, roles=list(roles))}"}


REQUESTER = _hdrs("rita", "admin")


async def _post(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], body: Any = None
) -> tuple[int, Any]:
    async with http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


@pytest.mark.slow
def test_quorum_race_on_two_server_processes(pg_dsn: str, spec: Path) -> None:
    one = Served(spec, pg_dsn)
    two = Served(spec, pg_dsn)
    try:
        asyncio.run(_race(pg_dsn, (one.base, two.base)))
    finally:
        one.stop()
        two.stop()


async def _race(dsn: str, bases: tuple[str, str]) -> None:
    # 17 distinct committee members, three of whom send their vote twice (to the other server)
    voters = [f"c{i}" for i in range(VOTERS - QUORUM)] + [f"c{i}" for i in range(QUORUM)]
    approvals: list[str] = []
    records: list[str] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for n in range(ROUNDS):
            status, created = await _post(http, f"{bases[n % 2]}/ap/doc", REQUESTER, {"title": f"r{n}"})
            assert status == 201, created
            record = created["data"]["id"]
            status, asked = await _post(http, f"{bases[(n + 1) % 2]}/ap/doc/{record}/race", REQUESTER)
            assert status == 202, asked
            approval = asked["approval"]["id"]
            answers = await asyncio.gather(
                *(
                    _post(http, f"{bases[i % 2]}/_approvals/{approval}/approve", _hdrs(v, "committee"))
                    for i, v in enumerate(voters)
                )
            )
            counted = [a for s, a in answers if s == 200]
            assert len(counted) == QUORUM, (n, answers)
            assert sum(1 for a in counted if "data" in a) == 1, (n, counted)  # exactly one advance
            assert all(s == 409 for s, _ in answers if s != 200), (n, answers)
            approvals.append(approval)
            records.append(record)
    conn = await asyncpg.connect(dsn)
    try:
        ids = [uuid.UUID(a) for a in approvals]
        votes = await conn.fetch(
            "SELECT approval_id, count(*) AS n, count(DISTINCT principal_sub) AS who "
            "FROM dap.approval_votes WHERE approval_id = ANY($1) GROUP BY approval_id",
            ids,
        )
        assert len(votes) == ROUNDS and all(r["n"] == QUORUM == r["who"] for r in votes)
        moved = await conn.fetch(
            'SELECT state, version FROM "ap__doc" WHERE id = ANY($1)', [uuid.UUID(r) for r in records]
        )
        assert len(moved) == ROUNDS and all(r["state"] == "published" and r["version"] == 2 for r in moved)
        outcomes = await conn.fetchval(
            "SELECT count(*) FROM dap.audit_log WHERE action = 'approval.approved' AND record_id = ANY($1)",
            [uuid.UUID(r) for r in records],
        )
        assert outcomes == ROUNDS
    finally:
        await conn.close()


@pytest.mark.slow
def test_escalation_fires_once_across_a_kill_9(pg_dsn: str, spec: Path) -> None:
    served = Served(spec, pg_dsn)
    try:
        approvals = asyncio.run(_open_solos(served.base, 10))
    finally:
        served.kill()  # kill -9 before the 1 s escalations are due
    time.sleep(1.5)  # due while no server runs
    served = Served(spec, pg_dsn)
    try:
        fired = asyncio.run(_wait_escalated(pg_dsn, approvals, deadline=10.0))
        assert fired == {a: 1 for a in approvals}
    finally:
        served.kill()  # and once more: a restart must not fire them again
    served = Served(spec, pg_dsn)
    try:
        time.sleep(1.0)
        assert asyncio.run(_counts(pg_dsn, approvals)) == {a: 1 for a in approvals}
    finally:
        served.stop()


async def _open_solos(base: str, count: int) -> list[str]:
    out = []
    async with aiohttp.ClientSession() as http:
        for n in range(count):
            status, created = await _post(http, f"{base}/ap/doc", REQUESTER, {"title": f"e{n}"})
            assert status == 201, created
            status, asked = await _post(http, f"{base}/ap/doc/{created['data']['id']}/solo", REQUESTER)
            assert status == 202, asked
            out.append(asked["approval"]["id"])
    return out


async def _counts(dsn: str, approvals: list[str]) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT changes->'approval'->>'id' AS id, count(*) AS n FROM dap.audit_log "
            "WHERE action = 'approval.escalated' AND changes->'approval'->>'id' = ANY($1) GROUP BY 1",
            approvals,
        )
        events = await conn.fetch(
            "SELECT payload->>'id' AS id, count(*) AS n FROM dap.outbox "
            "WHERE event = 'approval.escalated' AND payload->>'id' = ANY($1) GROUP BY 1",
            approvals,
        )
    finally:
        await conn.close()
    audited = {r["id"]: r["n"] for r in rows}
    assert audited == {r["id"]: r["n"] for r in events}  # one outbox event per audit row
    return audited


async def _wait_escalated(dsn: str, approvals: list[str], *, deadline: float) -> dict[str, int]:
    end = time.monotonic() + deadline
    while True:
        found = await _counts(dsn, approvals)
        if len(found) == len(approvals) or time.monotonic() > end:
            return found
        await asyncio.sleep(0.1)
