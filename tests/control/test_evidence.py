"""Evidence: validation per type (pure) and the HTTP endpoints on a real Postgres."""

from __future__ import annotations

from typing import Any

import aiohttp
import asyncpg
import pytest

from dap.control import errors
from dap.control.evidence import models
from tests.control.conftest import Start

AT = "2026-03-01T10:00:00+00:00"
SHA = "a" * 64

VALID: list[dict[str, Any]] = [
    {
        "type": "deploy_status",
        "at": AT,
        "workspace_id": "acme",
        "artifact_id": "art-1",
        "sha256": SHA,
        "phase": "loaded",
        "restart_required": True,
    },
    {"type": "health", "at": AT, "workspace_id": "acme", "status": "degraded", "checks": {"db": "slow"}},
    {
        "type": "metering",
        "at": AT,
        "workspace_id": "acme",
        "period_start": "2026-03-01T09:55:00Z",
        "period_end": "2026-03-01T10:00:00Z",
        "usage": {"requests": 1200, "cpu_seconds": 3.5},
    },
    {
        "type": "violation",
        "at": AT,
        "workspace_id": "acme",
        "kind": "rollback",
        "detail": "snapshot 3 < 4",
        "snapshot_version": 3,
    },
    {"type": "audit_anchor", "at": AT, "log": "region-eu", "sequence": 42, "root_sha256": SHA},
]


@pytest.mark.parametrize("record", [pytest.param(r, id=r["type"]) for r in VALID])
def test_valid_records(record: dict[str, Any]) -> None:
    [parsed] = models.validate_batch({"records": [record]})
    assert parsed.type == record["type"]
    assert parsed.id  # assigned when absent
    assert models.as_json(parsed)["at"].startswith("2026-03-01T10:00:00")


@pytest.mark.parametrize(
    ("record", "path"),
    [
        pytest.param({**VALID[0], "phase": "done"}, "records[0].phase", id="deploy-unknown-phase"),
        pytest.param({**VALID[0], "sha256": "xyz"}, "records[0].sha256", id="deploy-bad-sha"),
        pytest.param({**VALID[1], "at": "2026-03-01T10:00:00"}, "records[0].at", id="naive-timestamp"),
        pytest.param({**VALID[1], "extra": 1}, "records[0].extra", id="unknown-key"),
        pytest.param(
            {k: v for k, v in VALID[1].items() if k != "workspace_id"},
            "records[0].workspace_id",
            id="health-no-workspace",
        ),
        pytest.param({**VALID[2], "period_end": "2026-03-01T09:00:00Z"}, "records[0]", id="metering-period"),
        pytest.param(
            {**VALID[2], "usage": {"requests": -1}}, "records[0].usage.requests", id="metering-negative"
        ),
        pytest.param({**VALID[3], "kind": "other"}, "records[0].kind", id="violation-kind"),
        pytest.param({**VALID[4], "sequence": -1}, "records[0].sequence", id="anchor-sequence"),
        pytest.param({"type": "gossip", "at": AT}, "records[0]", id="unknown-type"),
        pytest.param({**VALID[1], "id": "bad id!"}, "records[0].id", id="bad-id"),
    ],
)
def test_invalid_records(record: dict[str, Any], path: str) -> None:
    with pytest.raises(errors.EvidenceInvalidError) as caught:
        models.validate_batch({"records": [VALID[1], record]})
    paths = [item.path for item in caught.value.errors]
    assert any(p.replace("records[1]", "records[0]").startswith(path) for p in paths), paths


def test_empty_and_oversized_batches() -> None:
    with pytest.raises(errors.EvidenceInvalidError):
        models.validate_batch({"records": []})
    with pytest.raises(errors.EvidenceInvalidError):
        models.validate_batch({"records": [VALID[1]] * (models.MAX_BATCH + 1)})
    with pytest.raises(errors.EvidenceInvalidError):
        models.validate_batch([VALID[1]])


async def test_post_query_and_idempotency(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control()
    records = [{**r, "id": f"rec-{i}"} for i, r in enumerate(VALID)]
    async with http.post(f"{control.url}/v1/evidence", json={"records": records}) as response:
        assert response.status == 202
        assert await response.json() == {"accepted": 5, "new": 5}
    async with http.post(f"{control.url}/v1/evidence", json={"records": records[:2]}) as response:
        assert await response.json() == {"accepted": 2, "new": 0}

    async def query(**params: str) -> list[str]:
        async with http.get(f"{control.url}/v1/evidence", params=params) as response:
            assert response.status == 200, await response.text()
            return [r["id"] for r in (await response.json())["records"]]

    assert sorted(await query()) == [f"rec-{i}" for i in range(5)]
    assert await query(type="health") == ["rec-1"]
    assert sorted(await query(workspace="acme")) == ["rec-0", "rec-1", "rec-2", "rec-3"]
    assert await query(since="2026-03-01T10:00:01Z") == []
    assert len(await query(since="2026-03-01T09:00:00+00:00")) == 5
    async with http.get(f"{control.url}/v1/evidence", params={"type": "gossip"}) as response:
        assert response.status == 400
    async with http.get(f"{control.url}/v1/evidence", params={"since": "yesterday"}) as response:
        assert response.status == 400


async def test_invalid_batch_stores_nothing(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control()
    batch = {"records": [{**VALID[1], "id": "good"}, {**VALID[0], "phase": "done"}]}
    async with http.post(f"{control.url}/v1/evidence", json=batch) as response:
        assert response.status == 422
        problem = await response.json()
    assert problem["code"] == "SVC.EVIDENCE.INVALID"
    assert [e["path"] for e in problem["errors"]] == ["records[1].phase"]
    conn = await asyncpg.connect(db_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM dap_control.evidence") == 0
    finally:
        await conn.close()
    async with http.post(f"{control.url}/v1/evidence", data=b"{not json") as response:
        assert response.status == 400
