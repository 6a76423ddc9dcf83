"""Region and cluster controls as two real processes' worth of parts: two servers on loopback,
two databases. The cluster syncs, serves while the region is down (also across its own restart),
and relays evidence once the region is back, nothing lost and nothing stored twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg

from dap.control.evidence import storing
from dap.control.serving import http
from dap.control.trust import envelopes, signing
from tests.control.conftest import MakeDsn, Start, json_upload, manifests, workspace_manifest

FAST = {"sync_interval": 0.2, "relay_interval": 0.2, "upstream_timeout": 2.0}
LABELS = {"dap.io/cluster-class": "std", "dap.io/region": "eu"}


async def eventually(check: Callable[[], Awaitable[Any]], seconds: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            result = await check()
        except (AssertionError, aiohttp.ClientError):
            if asyncio.get_running_loop().time() > deadline:
                raise
        else:
            if result:
                return result
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


def health_record(record_id: str, workspace: str = "acme") -> dict[str, Any]:
    return {
        "type": "health",
        "id": record_id,
        "at": datetime.now(UTC).isoformat(),
        "workspace_id": workspace,
        "status": "healthy",
    }


async def test_cluster_sync_outage_and_relay(
    start_control: Start, make_dsn: MakeDsn, db_dsn: str, http_session: aiohttp.ClientSession
) -> None:
    client = http_session
    signer = signing.Signer.generate()
    region = await start_control(mode="region", signer=signer)
    files = manifests(**{"ws.yaml": workspace_manifest("acme", cluster_class="std", region="eu")})
    async with client.post(f"{region.url}/v1/artifacts", json=json_upload("shop", files)) as response:
        assert response.status == 200, await response.text()
        registered = await response.json()
    # No cluster exists yet: the routing error is recorded on the binding.
    [binding] = registered["deployments"]
    assert binding["cluster_id"] is None
    assert "no cluster is registered" in binding["error"]

    cluster_dsn = await make_dsn()
    options = {"mode": "cluster", "region_url": region.url, "cluster_id": "c1", "labels": LABELS, **FAST}
    cluster = await start_control(dsn=cluster_dsn, **options)

    async def synced() -> dict[str, Any] | None:
        async with client.get(f"{cluster.url}/v1/snapshot", params={"workspace": "acme"}) as response:
            if response.status != 200:
                return None
            body: dict[str, Any] = await response.json()
            return body if body["deployments"] else None

    snapshot = await eventually(synced)
    assert snapshot["deployments"] == [
        {
            "workspace_id": "acme",
            "artifact_id": registered["artifact_id"],
            "sha256": registered["sha256"],
            "cluster_id": "c1",
        }
    ]
    trusted = {signer.key_id: signer.public_key}
    signing.verify(snapshot, trusted)
    async with client.get(f"{cluster.url}/v1/artifacts/{registered['artifact_id']}") as response:
        assert response.status == 200
        envelope = json.loads(await response.read())
    envelopes.verify(envelope, trusted)
    async with client.get(f"{cluster.url}/v1/keys") as response:
        assert (await response.json())["keys"] == [signer.public_key_entry()]

    # The region's tree head was anchored and relayed (audit_anchor): the outbox is empty again.
    async def anchored() -> bool:
        async with client.get(f"{region.url}/v1/evidence", params={"type": "audit_anchor"}) as response:
            return bool((await response.json())["records"])

    await eventually(anchored)
    conn = await asyncpg.connect(cluster_dsn)
    try:
        await eventually(lambda: _outbox_empty(conn))
    finally:
        await conn.close()

    # Region down: the cluster keeps serving, accepts evidence, keeps it in its outbox.
    await region.stop()
    async with client.get(f"{cluster.url}/v1/snapshot") as response:
        assert response.status == 200
        etag = response.headers["ETag"]
    async with client.get(f"{cluster.url}/v1/snapshot", headers={"If-None-Match": etag}) as response:
        assert response.status == 304
    batch = {"records": [health_record("h-1"), health_record("h-2")]}
    async with client.post(f"{cluster.url}/v1/evidence", json=batch) as response:
        assert response.status == 202
    await asyncio.sleep(0.6)  # a few relay rounds fail meanwhile
    async with client.get(f"{cluster.url}/health") as response:
        health = await response.json()
    assert health["region"]["relay_error"]
    assert health["outbox"] == 2

    # The cluster restarts while the region is still down: cache and outbox survive.
    await cluster.stop()
    cluster = await start_control(dsn=cluster_dsn, **options)
    async with client.get(f"{cluster.url}/v1/snapshot") as response:
        assert response.status == 200
        assert response.headers["ETag"] == etag
    async with client.get(f"{cluster.url}/v1/artifacts/{registered['artifact_id']}") as response:
        assert response.status == 200
    async with client.post(
        f"{cluster.url}/v1/evidence", json={"records": [health_record("h-2")]}
    ) as response:
        assert response.status == 202
        assert (await response.json())["new"] == 0  # same idempotency id: not queued twice
    conn = await asyncpg.connect(cluster_dsn)
    try:
        assert await storing.outbox_size(conn) == 2
    finally:
        await conn.close()

    # The region comes back on the same address: the outbox drains, each record stored once.
    region = await start_control(mode="region", signer=signer, port=region.port)

    async def relayed() -> list[dict[str, Any]] | None:
        async with client.get(f"{region.url}/v1/evidence", params={"workspace": "acme"}) as response:
            records: list[dict[str, Any]] = (await response.json())["records"]
            return records if len(records) >= 2 else None

    records = await eventually(relayed)
    assert sorted(r["id"] for r in records) == ["h-1", "h-2"]
    assert {r["cluster_id"] for r in records} == {"c1"}
    conn = await asyncpg.connect(cluster_dsn)
    try:
        await eventually(lambda: _outbox_empty(conn))
    finally:
        await conn.close()
    conn = await asyncpg.connect(db_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM dap_control.evidence WHERE type = 'health'") == 2
        # the anchor of the head seen before the outage, and not a second copy after the restart
        assert (
            await conn.fetchval("SELECT count(*) FROM dap_control.evidence WHERE type = 'audit_anchor'") == 1
        )
    finally:
        await conn.close()


async def _outbox_empty(conn: asyncpg.Connection) -> bool:
    return await storing.outbox_size(conn) == 0


async def test_cluster_refuses_artifacts_signed_by_an_untrusted_key(
    start_control: Start, make_dsn: MakeDsn, http_session: aiohttp.ClientSession
) -> None:
    region = await start_control(mode="region")
    files = manifests(**{"ws.yaml": workspace_manifest("acme")})
    async with http_session.post(f"{region.url}/v1/artifacts", json=json_upload("shop", files)) as response:
        assert response.status == 200
    stranger = signing.Signer.generate()
    cluster = await start_control(
        dsn=await make_dsn(),
        mode="cluster",
        region_url=region.url,
        cluster_id="c9",
        trusted_keys=(stranger.public_key,),
        **FAST,
    )

    async def failed() -> str | None:
        async with http_session.get(f"{cluster.url}/health") as response:
            error: str | None = (await response.json())["region"]["sync_error"]
            return error

    assert "not trusted" in await eventually(failed)
    async with http_session.get(f"{cluster.url}/v1/snapshot") as response:
        assert response.status == 502  # nothing verified, nothing served
    assert cluster.app[http.LIVE].region is None


async def test_cluster_syncs_from_a_standalone_control(
    start_control: Start, make_dsn: MakeDsn, http_session: aiohttp.ClientSession
) -> None:
    standalone = await start_control()  # no cluster registry: the announcement is refused
    async with http_session.post(
        f"{standalone.url}/v1/artifacts", json=json_upload("shop", manifests(), ["acme"])
    ) as response:
        registered = await response.json()
    cluster = await start_control(
        dsn=await make_dsn(), mode="cluster", region_url=standalone.url, cluster_id="local", **FAST
    )

    async def synced() -> list[str] | None:
        async with http_session.get(f"{cluster.url}/v1/snapshot") as response:
            if response.status != 200:
                return None
            return [d["artifact_id"] for d in (await response.json())["deployments"]] or None

    assert await eventually(synced) == [registered["artifact_id"]]
    async with http_session.get(f"{cluster.url}/health") as response:
        assert "404" in (await response.json())["region"]["announce_error"]
