"""The transparency log of a real control on loopback with real Postgres (``GET /v1/log/...``).

Every registration, revocation and key is a leaf; every answer is checked here with the pure
verifier of ``dap.config.tlog`` and the control's public key, as a pod or monitor would.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import aiohttp
import asyncpg
import pytest
import yarl

from dap.config import tlog
from dap.control.trust import signing
from tests.control.conftest import MakeDsn, Start, json_upload, manifests
from tests.control.test_cli import run
from tests.control.test_cluster import FAST, eventually


async def get(http: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Any]:
    async with http.get(url, params={k: str(v) for k, v in params.items()}) as response:
        return response.status, await response.json(content_type=None)


def checked_head(head: dict[str, Any], signer: signing.Signer) -> tuple[int, bytes]:
    signing.verify(head, {signer.key_id: signer.public_key})
    return tlog.parse_head(head)


async def register(http: aiohttp.ClientSession, url: str, app: str, **extra: bytes) -> dict[str, Any]:
    async with http.post(f"{url}/v1/artifacts", json=json_upload(app, manifests(**extra), ["acme"])) as r:
        body: dict[str, Any] = await r.json()
        assert r.status == 200, body
        return body


async def test_registrations_are_logged_with_proofs_that_verify(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    signer = signing.Signer.generate()
    control = await start_control(signer=signer)
    status, head = await get(http, f"{control.url}/v1/log/head")
    assert status == 200
    size0, root0 = checked_head(head, signer)
    assert size0 == 1  # the control's key
    _, entries = await get(http, f"{control.url}/v1/log/entries")
    assert entries["entries"][0]["entry"]["type"] == "key"
    assert entries["entries"][0]["entry"]["key_id"] == signer.key_id

    registered = [await register(http, control.url, "shop", **{f"f{i}.txt": b"%d" % i}) for i in range(5)]
    again = await register(http, control.url, "shop", **{"f4.txt": b"4"})  # idempotent: no new leaf
    assert again["created"] is False
    for answer in registered:
        status, proof = await get(
            http, f"{control.url}/v1/log/proof", artifact_id=answer["artifact_id"], from_size=size0
        )
        assert status == 200, proof
        size, root = checked_head(proof["tree_head"], signer)
        assert size == 6
        entry = proof["entry"]
        assert entry["type"] == "register" and entry["artifact_id"] == answer["artifact_id"]
        async with http.get(f"{control.url}/v1/artifacts/{answer['artifact_id']}") as response:
            envelope = await response.read()
        assert entry["envelope_sha256"] == hashlib.sha256(envelope).hexdigest()
        tlog.verify_inclusion(
            proof["leaf_index"], size, tlog.entry_hash(entry), tlog.parse_proof(proof["inclusion"]), root
        )
        tlog.verify_consistency(size0, size, root0, root, tlog.parse_proof(proof["consistency"]))

    # the entries recompute the signed root, and every earlier head is consistent with the latest
    _, entries = await get(http, f"{control.url}/v1/log/entries")
    leaves = [tlog.entry_hash(e["entry"]) for e in entries["entries"]]
    assert [e["leaf_hash"] for e in entries["entries"]] == [h.hex() for h in leaves]
    assert tlog.tree_hash(leaves) == root
    for first in range(1, 6):
        status, answer = await get(http, f"{control.url}/v1/log/consistency", first=first)
        assert status == 200
        _, old = await get(http, f"{control.url}/v1/log/consistency", first=0, second=first)
        old_size, old_root = checked_head(old["tree_head"], signer)
        assert old_size == first and old_root == tlog.tree_hash(leaves[:first])
        tlog.verify_consistency(first, 6, old_root, root, tlog.parse_proof(answer["proof"]))
    _, mine = await get(http, f"{control.url}/v1/log/entries", app="shop", start=3)
    assert [e["index"] for e in mine["entries"]] == [3, 4, 5]


async def test_bad_parameters_and_unknown_entries_are_problems(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    for params in ({"index": "x"}, {"index": "-1"}, {}, {"artifact_id": "art-x"}, {"index": 99}):
        status, body = await get(http, f"{control.url}/v1/log/proof", **params)
        assert status in (400, 404), body
        assert body["code"] in ("SVC.REQUEST.MALFORMED", "SVC.CONTROL.NOT_FOUND")
        assert body["detail"]
    status, body = await get(http, f"{control.url}/v1/log/proof", index=0, from_size=5)
    assert (status, body["code"]) == (400, "SVC.REQUEST.MALFORMED")
    status, body = await get(http, f"{control.url}/v1/log/consistency", first=2, second=1)
    assert (status, body["code"]) == (400, "SVC.REQUEST.MALFORMED")
    status, body = await get(http, f"{control.url}/v1/log/consistency", first=0, second=7)
    assert (status, body["code"]) == (404, "SVC.CONTROL.NOT_FOUND")


async def test_a_refused_registration_appends_nothing(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    bad = {"buying/module.yaml": b"kind: Nonsense\n"}
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("shop", bad)) as response:
        assert response.status == 422
    _, head = await get(http, f"{control.url}/v1/log/head")
    assert head["tree_size"] == 1


async def test_revoke_is_logged_and_its_head_signed_by_the_serving_control(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    signer = signing.Signer.generate()
    control = await start_control(signer=signer)
    await register(http, control.url, "shop")
    second = await register(http, control.url, "shop", **{"v2.txt": b"2"})
    code, _, err = await run("control", "revoke", second["artifact_id"], "--db", db_dsn)
    assert code == 0, err
    for _ in range(100):  # signed on the change notification, without any reader asking
        connection = await asyncpg.connect(db_dsn)
        try:
            heads = await connection.fetchval("SELECT max(tree_size) FROM dap_control.log_heads")
        finally:
            await connection.close()
        if heads == 4:
            break
        await asyncio.sleep(0.05)
    assert heads == 4
    _, entries = await get(http, f"{control.url}/v1/log/entries", start=3)
    (revoked,) = entries["entries"]
    assert revoked["entry"]["type"] == "revoke" and revoked["entry"]["artifact_id"] == second["artifact_id"]
    code, _, _ = await run("control", "revoke", second["artifact_id"], "--db", db_dsn)
    assert code == 0  # revoking twice changes nothing and logs nothing
    _, head = await get(http, f"{control.url}/v1/log/head")
    assert head["tree_size"] == 4


async def test_artifacts_from_before_the_log_are_backfilled_and_a_new_key_is_logged(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control()
    first = await register(http, control.url, "shop")
    await control.stop()
    connection = await asyncpg.connect(db_dsn)
    try:  # a database as the previous release left it: artifacts, no log
        await connection.execute(
            "TRUNCATE dap_control.log_leaves, dap_control.log_nodes, dap_control.log_heads"
        )
    finally:
        await connection.close()
    signer = signing.Signer.generate()
    restarted = await start_control(signer=signer)
    _, entries = await get(http, f"{restarted.url}/v1/log/entries")
    kinds = [
        (e["entry"]["type"], e["entry"].get("artifact_id") or e["entry"].get("key_id"))
        for e in entries["entries"]
    ]
    assert kinds == [("key", signer.key_id), ("register", first["artifact_id"])]
    status, proof = await get(http, f"{restarted.url}/v1/log/proof", artifact_id=first["artifact_id"])
    assert status == 200
    size, root = checked_head(proof["tree_head"], signer)
    tlog.verify_inclusion(
        1, size, tlog.entry_hash(proof["entry"]), tlog.parse_proof(proof["inclusion"]), root
    )


async def test_a_cluster_relays_the_log_and_anchors_the_region_heads(
    start_control: Start, make_dsn: MakeDsn, http: aiohttp.ClientSession
) -> None:
    signer = signing.Signer.generate()
    region = await start_control(mode="region", signer=signer)
    first = await register(http, region.url, "shop")
    options = {"mode": "cluster", "region_url": region.url, "cluster_id": "c1", **FAST}
    cluster = await start_control(dsn=await make_dsn(), **options)

    async def anchored(size: int) -> bool:
        status, body = await get(http, f"{region.url}/v1/evidence", type="audit_anchor")
        return status == 200 and any(
            r["sequence"] == size and r["cluster_id"] == "c1" for r in body["records"]
        )

    await eventually(lambda: anchored(2))
    await register(http, region.url, "shop", **{"v2.txt": b"2"})
    await eventually(lambda: anchored(3))
    _, records = await get(http, f"{region.url}/v1/evidence", type="audit_anchor")
    _, head = await get(http, f"{region.url}/v1/log/head")
    assert any(r["root_sha256"] == head["root_hash"] for r in records["records"])
    # the cluster relays the region's proofs byte for byte; the pod checks the region's signature
    status, proof = await get(
        http, f"{cluster.url}/v1/log/proof", artifact_id=first["artifact_id"], from_size=1
    )
    assert status == 200
    size, root = checked_head(proof["tree_head"], signer)
    tlog.verify_inclusion(
        1, size, tlog.entry_hash(proof["entry"]), tlog.parse_proof(proof["inclusion"]), root
    )
    status, problem = await get(http, f"{cluster.url}/v1/log/proof", artifact_id="art-nope")
    assert (status, problem["code"]) == (404, "SVC.CONTROL.NOT_FOUND")


# every query and path parameter the control reads, with what Postgres text cannot hold (issue 40
# row 17): a 400 problem naming the parameter, never a 500
NUL_PARAMETERS = [
    pytest.param("GET", "/v1/log/entries?app=%00", "app", id="log-entries-app"),
    pytest.param("GET", "/v1/log/proof?artifact_id=x%00", "artifact_id", id="log-proof-artifact"),
    pytest.param("GET", "/v1/log/consistency?first=0%00", "first", id="log-consistency-first"),
    pytest.param("GET", "/v1/artifacts/art%00x", "artifact_id", id="artifact-path"),
    pytest.param("GET", "/v1/evidence?workspace=acme%00", "workspace", id="evidence-workspace"),
    pytest.param("GET", "/v1/workspace-status?workspace=%00", "workspace", id="workspace-status"),
    pytest.param("GET", "/v1/placements?cluster=c%00", "cluster", id="placements-cluster"),
    pytest.param("GET", "/v1/snapshot?workspace=a%01b", "workspace", id="snapshot-control-char"),
    pytest.param("PUT", "/v1/clusters/c%00", "cluster_id", id="cluster-path"),
]
NOW = "2026-01-01T00:00:00Z"
# and every JSON body it stores: Postgres text and jsonb hold no NUL either
NUL_BODIES = [
    pytest.param(
        "/v1/node-health",
        {"cluster": "c\x00", "node": "n", "status": "ok", "workspaces": 0, "cpu": 0, "memory": 0, "at": NOW},
        "cluster",
        id="node-health",
    ),
    pytest.param(
        "/v1/workspace-status",
        {"cluster": "c", "workspace": "w\x00", "phase": "Ready", "at": NOW},
        "workspace",
        id="workspace-status",
    ),
    pytest.param(
        "/v1/evidence",
        {
            "records": [
                {"type": "health", "at": NOW, "workspace_id": "a", "status": "healthy", "pod": "p\x00"}
            ]
        },
        "records[0].pod",
        id="evidence",
    ),
    pytest.param("/v1/clusters/c", {"labels": {"zone\x00": "a"}}, "labels.zone\\u0000", id="cluster-label"),
]


@pytest.mark.parametrize(("method", "path", "name"), NUL_PARAMETERS)
async def test_a_parameter_with_nul_is_a_400_naming_it(
    start_control: Start, http: aiohttp.ClientSession, method: str, path: str, name: str
) -> None:
    control = await start_control(mode="region" if path.startswith("/v1/clusters") else "standalone")
    url = yarl.URL(f"{control.url}{path}", encoded=True)
    async with http.request(method, url, json={"labels": {}}) as response:
        body = await response.json(content_type=None)
        assert (response.status, body["code"]) == (400, "SVC.REQUEST.MALFORMED"), body
        assert response.content_type == "application/problem+json"
    assert [e["path"] for e in body["errors"]] == [name], body
    assert name in body["detail"]


@pytest.mark.parametrize(("path", "body", "name"), NUL_BODIES)
async def test_a_body_with_nul_is_a_400_naming_the_field(
    start_control: Start, http: aiohttp.ClientSession, path: str, body: Any, name: str
) -> None:
    control = await start_control(mode="region" if path.startswith("/v1/clusters") else "standalone")
    method = http.put if path.startswith("/v1/clusters") else http.post
    async with method(f"{control.url}{path}", json=body) as response:
        answer = await response.json(content_type=None)
        assert (response.status, answer["code"]) == (400, "SVC.REQUEST.MALFORMED"), answer["errors"]
    assert [e["path"] for e in answer["errors"]] == [name], answer
