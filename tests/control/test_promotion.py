"""Promotion rules: the pure choice (``promotions.promoted``) and a real control with real evidence."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from dap.control.supply import promotions
from tests.control.conftest import Start, json_upload, manifests
from tests.control.test_cli import run
from tests.control.test_tlog import get

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
V1 = promotions.Candidate("art-1", 1, "1" * 64)
V2 = promotions.Candidate("art-2", 2, "2" * 64)


def test_the_newest_artifact_that_soaked_without_trouble_is_promoted() -> None:
    ran = promotions.Record(NOW - 2 * HOUR, failed=False)
    fresh = promotions.Record(NOW - HOUR / 2, failed=False)
    choose = promotions.promoted
    assert choose([V1, V2], {"art-1": ran, "art-2": ran}, [], after=HOUR, now=NOW) == V2
    assert choose([V1, V2], {"art-1": ran, "art-2": fresh}, [], after=HOUR, now=NOW) == V1  # v2 soaks
    assert choose([V1, V2], {"art-1": ran}, [], after=HOUR, now=NOW) == V1  # v2 never ran in staging
    failed = promotions.Record(NOW - 2 * HOUR, failed=True)
    assert choose([V1, V2], {"art-1": ran, "art-2": failed}, [], after=HOUR, now=NOW) == V1
    sick = [NOW - 90 * timedelta(minutes=1)]  # staging unhealthy while v2 soaked
    assert (
        choose(
            [V1, V2],
            {"art-1": promotions.Record(NOW - 5 * HOUR, False), "art-2": ran},
            sick,
            after=HOUR,
            now=NOW,
        )
        == V1
    )
    assert choose([V1], {}, [], after=HOUR, now=NOW) is None
    assert choose([V2], {"art-2": promotions.Record(None, False)}, [], after=HOUR, now=NOW) is None


def status(
    workspace: str, artifact: dict[str, Any], phase: str, at: datetime | None = None
) -> dict[str, Any]:
    return {
        "type": "deploy_status",
        "at": (at or datetime.now(UTC)).isoformat(),
        "workspace_id": workspace,
        "artifact_id": artifact["artifact_id"],
        "sha256": artifact["sha256"],
        "phase": phase,
    }


async def post(http: aiohttp.ClientSession, url: str, *records: dict[str, Any]) -> None:
    async with http.post(f"{url}/v1/evidence", json={"records": list(records)}) as response:
        assert response.status == 202, await response.text()


async def artifacts(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    _, body = await get(http, f"{url}/v1/snapshot")
    return {d["workspace_id"]: d["artifact_id"] for d in body["deployments"]}


async def test_promotion_waits_for_the_staging_time(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control(freeze_check_interval=0.2)
    code, out, err = await run(
        "control", "policy", "promote", "--app", "shop", "--from-workspace", "stage",
        "--to-workspace", "prod", "--after", "3s", "--db", db_dsn,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["after_seconds"] == 3
    async with http.post(
        f"{control.url}/v1/artifacts", json=json_upload("shop", manifests(), ["stage", "prod"])
    ) as r:
        v1 = await r.json()
    await asyncio.sleep(0.5)
    assert await artifacts(http, control.url) == {"stage": v1["artifact_id"]}  # prod waits
    await post(http, control.url, status("stage", v1, "loaded"))
    ran = asyncio.get_running_loop().time()
    await asyncio.sleep(1.0)
    assert "prod" not in await artifacts(http, control.url)  # not yet 3 s in staging
    while "prod" not in await artifacts(http, control.url):
        await asyncio.sleep(0.1)
        assert asyncio.get_running_loop().time() - ran < 10
    assert asyncio.get_running_loop().time() - ran >= 3.0
    assert (await artifacts(http, control.url))["prod"] == v1["artifact_id"]

    # v2 goes to staging at once; prod keeps v1; a violation in staging keeps v2 out of prod
    async with http.post(
        f"{control.url}/v1/artifacts", json=json_upload("shop", manifests(**{"v2": b"2"}))
    ) as r:
        v2 = await r.json()
    await asyncio.sleep(0.5)
    assert await artifacts(http, control.url) == {"stage": v2["artifact_id"], "prod": v1["artifact_id"]}
    violation = {
        "type": "violation",
        "at": datetime.now(UTC).isoformat(),
        "workspace_id": "stage",
        "kind": "signature",
        "detail": "bad",
        "artifact_id": v2["artifact_id"],
    }
    await post(http, control.url, status("stage", v2, "loaded"), violation)
    await asyncio.sleep(3.5)
    assert (await artifacts(http, control.url))["prod"] == v1["artifact_id"]
    _, entries = await get(http, f"{control.url}/v1/log/entries", app="shop")
    assert entries["entries"][0]["entry"]["type"] == "promotion"


async def test_the_soak_runs_on_the_controls_clock_whatever_at_the_reporter_sends(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    """Issue 40: a ``deploy_status`` dated years ago must not skip the soak, nor one dated years
    ahead postpone it: the soak starts when the control received the first report of running."""
    control = await start_control(freeze_check_interval=0.2)
    code, _, err = await run(
        "control", "policy", "promote", "--app", "shop", "--from-workspace", "stage",
        "--to-workspace", "prod", "--after", "3s", "--db", db_dsn,
    )  # fmt: skip
    assert code == 0, err
    async with http.post(
        f"{control.url}/v1/artifacts", json=json_upload("shop", manifests(), ["stage", "prod"])
    ) as r:
        v1 = await r.json()
    past = datetime(2001, 1, 1, tzinfo=UTC)
    await post(http, control.url, status("stage", v1, "loaded", at=past))
    ran = asyncio.get_running_loop().time()
    await asyncio.sleep(1.5)
    assert "prod" not in await artifacts(http, control.url), "a report dated 2001 skipped the soak"

    async with http.post(
        f"{control.url}/v1/artifacts", json=json_upload("shop", manifests(**{"v2": b"2"}))
    ) as r:
        v2 = await r.json()
    future = datetime.now(UTC) + timedelta(days=3650)
    await post(http, control.url, status("stage", v2, "loaded", at=future))
    while (await artifacts(http, control.url)).get("prod") != v1["artifact_id"]:
        await asyncio.sleep(0.1)
        assert asyncio.get_running_loop().time() - ran < 10, "v1 soaked 3 s and was never promoted"
    assert asyncio.get_running_loop().time() - ran >= 3.0
    reported = asyncio.get_running_loop().time()
    while (await artifacts(http, control.url)).get("prod") != v2["artifact_id"]:
        await asyncio.sleep(0.1)
        waited = asyncio.get_running_loop().time() - reported
        assert waited < 10, "a report dated ten years ahead postponed the soak"
