"""Endpoint availability per mode, dev long-poll and /v1/poll, operator reports."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import aiohttp
import pytest

from tests.control.conftest import Start, json_upload, manifests

REGION = "http://127.0.0.1:9"  # never contacted within these short tests


@pytest.mark.parametrize(
    ("options", "method", "path", "available"),
    [
        pytest.param({"mode": "region"}, "POST", "/v1/artifacts", True, id="region-artifacts"),
        pytest.param({"mode": "standalone"}, "POST", "/v1/artifacts", True, id="standalone-artifacts"),
        pytest.param(
            {"mode": "cluster", "region_url": REGION}, "POST", "/v1/artifacts", False, id="cluster-artifacts"
        ),
        pytest.param({"mode": "standalone", "dev": True}, "POST", "/v1/poll", True, id="standalone-dev-poll"),
        pytest.param({"mode": "standalone"}, "POST", "/v1/poll", False, id="standalone-poll"),
        pytest.param({"mode": "region", "dev": True}, "POST", "/v1/poll", False, id="region-dev-poll"),
        pytest.param({"mode": "region"}, "GET", "/v1/clusters", True, id="region-clusters"),
        pytest.param({"mode": "standalone"}, "GET", "/v1/clusters", False, id="standalone-clusters"),
        pytest.param({"mode": "cluster", "region_url": REGION}, "GET", "/health", True, id="cluster-health"),
        pytest.param({"mode": "region"}, "GET", "/health", True, id="region-health"),
        pytest.param({"mode": "standalone"}, "GET", "/v1/keys", True, id="standalone-keys"),
    ],
)
async def test_endpoint_availability(
    start_control: Start,
    http: aiohttp.ClientSession,
    options: dict[str, object],
    method: str,
    path: str,
    available: bool,
) -> None:
    control = await start_control(**options)
    async with http.request(method, f"{control.url}{path}", json={}) as response:
        if available:
            assert response.status not in (404, 405), await response.text()
        else:
            assert response.status in (404, 405)
            assert response.content_type == "application/problem+json"


async def test_dev_long_poll_is_woken_by_poll_and_by_registration(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control(dev=True)
    async with http.get(f"{control.url}/v1/snapshot") as response:
        etag = response.headers["ETag"]
    url = f"{control.url}/v1/snapshot?wait=20"

    async def parked() -> int:
        async with http.get(url, headers={"If-None-Match": etag}) as response:
            return response.status

    loop = asyncio.get_running_loop()
    started = loop.time()
    waiter = asyncio.create_task(parked())
    await asyncio.sleep(0.2)
    assert not waiter.done()
    async with http.post(f"{control.url}/v1/poll") as response:
        assert response.status == 202
        assert (await response.json())["woken"] == 1
    assert await asyncio.wait_for(waiter, 5) == 200  # woken: pull now
    assert loop.time() - started < 5

    waiter = asyncio.create_task(parked())
    await asyncio.sleep(0.2)
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("shop", manifests())) as response:
        assert response.status == 200
    assert await asyncio.wait_for(waiter, 5) == 200

    async with http.get(f"{control.url}/v1/snapshot") as response:
        etag = response.headers["ETag"]
    async with http.get(f"{control.url}/v1/snapshot?wait=0.2", headers={"If-None-Match": etag}) as response:
        assert response.status == 304  # nothing happened within the wait


async def test_region_routes_by_labels_and_load(start_control: Start, http: aiohttp.ClientSession) -> None:
    region = await start_control(mode="region")
    labels = {"dap.io/cluster-class": "std", "dap.io/region": "eu"}
    for cluster_id, cpu in (("c-busy", 0.9), ("c-idle", 0.1)):
        async with http.put(f"{region.url}/v1/clusters/{cluster_id}", json={"labels": labels}) as response:
            assert response.status == 200, await response.text()
        report = {
            "cluster": cluster_id,
            "node": "n1",
            "status": "Ready",
            "workspaces": 0,
            "cpu": cpu,
            "memory": 0.5,
            "at": datetime.now(UTC).isoformat(),
        }
        async with http.post(f"{region.url}/v1/node-health", json=report) as response:
            assert response.status == 202
    async with http.put(f"{region.url}/v1/clusters/c-us", json={"labels": {**labels, "dap.io/region": "us"}}):
        pass
    ws = (
        b"apiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: acme}\n"
        b"spec: {cluster_class: std, region: eu}\n"
        b"---\napiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: pinned}\nspec: {cluster: c-busy}\n"
        b"---\napiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: lost}\nspec: {cluster_class: gpu}\n"
    )
    async with http.post(
        f"{region.url}/v1/artifacts", json=json_upload("shop", manifests(**{"ws.yaml": ws}))
    ) as r:
        assert r.status == 200, await r.text()
        placed = {d["workspace_id"]: d for d in (await r.json())["deployments"]}
    assert placed["acme"]["cluster_id"] == "c-idle"  # lowest load among matching clusters
    assert placed["pinned"]["cluster_id"] == "c-busy"  # direct assignment bypasses routing
    assert placed["lost"]["cluster_id"] is None
    assert "class 'std' != 'gpu'" in placed["lost"]["error"]
    async with http.get(f"{region.url}/v1/snapshot", params={"cluster": "c-idle"}) as response:
        assert [d["workspace_id"] for d in (await response.json())["deployments"]] == ["acme"]

    # A gpu cluster appears: the unplaced binding is routed and the snapshot version moves.
    async with http.get(f"{region.url}/v1/snapshot") as response:
        before = (await response.json())["version"]
    async with http.put(
        f"{region.url}/v1/clusters/c-gpu", json={"labels": {"dap.io/cluster-class": "gpu"}}
    ) as r:
        assert (await r.json())["rerouted"] is True
    async with http.get(f"{region.url}/v1/snapshot", params={"cluster": "c-gpu"}) as response:
        body = await response.json()
    assert body["version"] == before + 1
    assert [d["workspace_id"] for d in body["deployments"]] == ["lost"]
    async with http.get(f"{region.url}/v1/clusters") as response:
        counts = {c["cluster_id"]: c["workspace_count"] for c in (await response.json())["clusters"]}
    assert counts == {"c-busy": 1, "c-idle": 1, "c-us": 0, "c-gpu": 1}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param(
            "/v1/node-health",
            {
                "cluster": "c",
                "node": "n",
                "status": "Ready",
                "workspaces": -1,
                "cpu": 0,
                "memory": 0,
                "at": "2026-01-01T00:00:00Z",
            },
            id="negative-count",
        ),
        pytest.param(
            "/v1/workspace-status",
            {"cluster": "c", "workspace": "w", "phase": "Sleeping", "at": "2026-01-01T00:00:00Z"},
            id="unknown-phase",
        ),
        pytest.param(
            "/v1/workspace-status", {"cluster": "c", "workspace": "w", "phase": "Ready"}, id="no-at"
        ),
    ],
)
async def test_bad_operator_reports(
    start_control: Start, http: aiohttp.ClientSession, path: str, body: dict[str, object]
) -> None:
    control = await start_control()
    async with http.post(f"{control.url}{path}", json=body) as response:
        assert response.status == 400
        assert (await response.json())["errors"]


async def test_workspace_status_round_trip(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control()
    report = {
        "cluster": "local",
        "workspace": "acme",
        "phase": "Ready",
        "conditions": [{"type": "Ready", "status": "True"}],
        "at": "2026-01-01T00:00:00+00:00",
    }
    async with http.post(f"{control.url}/v1/workspace-status", json=report) as response:
        assert response.status == 202
    async with http.get(f"{control.url}/v1/workspace-status", params={"workspace": "acme"}) as response:
        [row] = (await response.json())["statuses"]
    assert row["phase"] == "Ready"
    assert row["conditions"] == report["conditions"]


async def test_a_late_reload_never_takes_the_snapshot_back(start_control: Start) -> None:
    """Two reloads in flight: the one that read the older version may finish last; the served
    snapshot keeps the newer one (versions only grow)."""
    import dataclasses

    from dap.control.serving import http as control_http

    region = await start_control(mode="region")
    live = region.app[control_http.LIVE]
    newer = dataclasses.replace(live.state, version=live.state.version + 5)
    live.replace(newer)  # as if a reload of a later version had already finished
    await control_http.reload_state(region.app)  # reads the (older) version in Postgres
    assert live.state.version == newer.version
