"""Registration over real HTTP on loopback with a real Postgres: round trip, signatures, chain,
idempotency, validation failures, limits, snapshots and ETags."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from datetime import timedelta

import aiohttp
import asyncpg
import nacl.exceptions
import nacl.signing
import pytest

from dap.control.artifacts import registration
from dap.control.trust import signing
from tests.control.conftest import Start, json_upload, manifests, workspace_manifest


async def _keys(http: aiohttp.ClientSession, url: str) -> dict[str, bytes]:
    async with http.get(f"{url}/v1/keys") as response:
        assert response.status == 200
        body = await response.json()
    return {k["key_id"]: bytes.fromhex(k["public_key"]) for k in body["keys"]}


def _independent_verify(envelope: dict[str, object], public_key: bytes) -> None:
    """Verification written from ARCHITECTURE.md alone, not with dap.control.trust.signing."""
    unsigned = {**envelope, "signature": ""}
    message = json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    nacl.signing.VerifyKey(public_key).verify(message, bytes.fromhex(str(envelope["signature"])))


async def test_round_trip_and_independent_verification(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    files = manifests(**{"scripts/hook.py": b"print('hi')\n", "assets/logo.png": bytes(range(256))})
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("buying", files)) as response:
        assert response.status == 200, await response.text()
        result = await response.json()
    assert result["version"] == 1
    async with http.get(f"{control.url}/v1/artifacts/{result['artifact_id']}") as response:
        assert response.status == 200
        envelope = await response.json()
    assert set(envelope) == {
        "artifact_id",
        "app",
        "version",
        "sha256",
        "files",
        "signature",
        "signing_key_id",
        "prev_version",
        "prev_sha256",
        "created_at",
    }
    assert envelope["sha256"] == result["sha256"]
    assert {f["path"]: base64.b64decode(f["content"]) for f in envelope["files"]} == files
    for entry in envelope["files"]:
        assert entry["sha256"] == hashlib.sha256(files[entry["path"]]).hexdigest()
    lines = "".join(f"{p}\0{hashlib.sha256(files[p]).hexdigest()}\n" for p in sorted(files))
    assert envelope["sha256"] == hashlib.sha256(lines.encode()).hexdigest()

    keys = await _keys(http, control.url)
    public_key = keys[envelope["signing_key_id"]]
    assert envelope["signing_key_id"] == hashlib.sha256(public_key).hexdigest()[:16]
    _independent_verify(envelope, public_key)

    # A flipped byte in a file, in the envelope, or another key: all fail.
    tampered_file = json.loads(json.dumps(envelope))
    content = bytearray(base64.b64decode(tampered_file["files"][0]["content"]))
    content[0] ^= 1
    tampered_file["files"][0]["content"] = base64.b64encode(bytes(content)).decode()
    with pytest.raises(nacl.exceptions.BadSignatureError):
        _independent_verify(tampered_file, public_key)
    tampered_meta = {**envelope, "version": 2}
    with pytest.raises(nacl.exceptions.BadSignatureError):
        _independent_verify(tampered_meta, public_key)
    with pytest.raises(nacl.exceptions.BadSignatureError):
        _independent_verify(envelope, signing.Signer.generate().public_key)


async def test_multipart_registration_equals_json(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control()
    files = manifests(**{"app/main.js": b"console.log(1)\n"})
    form = aiohttp.FormData()
    form.add_field("app", "shop")
    form.add_field("workspace", "acme")
    for path, content in files.items():
        form.add_field("file", content, filename=path, content_type="application/octet-stream")
    async with http.post(f"{control.url}/v1/artifacts", data=form) as response:
        assert response.status == 200, await response.text()
        by_form = await response.json()
    assert by_form["deployments"] == [{"workspace_id": "acme", "cluster_id": "local", "error": None}]
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("shop", files)) as response:
        by_json = await response.json()
    assert by_json["artifact_id"] == by_form["artifact_id"]
    assert by_json["created"] is False


async def test_version_chain_and_idempotency(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control()
    url = f"{control.url}/v1/artifacts"
    first_files = manifests()
    async with http.post(url, json=json_upload("chain", first_files, ["ws-one"])) as response:
        first = await response.json()
    async with http.get(f"{control.url}/v1/snapshot") as response:
        etag_after_first = response.headers["ETag"]
    async with http.post(url, json=json_upload("chain", first_files, ["ws-one"])) as response:
        again = await response.json()
    assert again == {**first, "created": False, "snapshot_version": None}
    async with http.get(f"{control.url}/v1/snapshot") as response:
        assert response.headers["ETag"] == etag_after_first  # nothing changed, no new snapshot

    async with http.post(url, json=json_upload("chain", manifests(**{"x.txt": b"2"}))) as response:
        second = await response.json()
    assert second["version"] == 2
    async with http.get(f"{control.url}/v1/artifacts/{second['artifact_id']}") as response:
        envelope = await response.json()
    assert envelope["prev_version"] == 1
    assert envelope["prev_sha256"] == first["sha256"]
    # The binding of ws-one followed the app to version 2 (the reference behaviour forgot this).
    async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "ws-one"}) as response:
        snapshot = await response.json()
    assert [d["artifact_id"] for d in snapshot["deployments"]] == [second["artifact_id"]]


async def test_invalid_manifests_give_422_and_store_nothing(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control()
    broken = b"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: b, module: buying}\n"
    broken += b"spec: {fields: [{name: 1}]}\n"
    bad = manifests(**{"buying/broken.yaml": broken})
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("bad", bad, ["acme"])) as response:
        assert response.status == 422
        assert response.content_type == "application/problem+json"
        problem = await response.json()
    assert problem["code"] == "SVC.ARTIFACT.INVALID"
    assert problem["type"] == "urn:dap:error:SVC.ARTIFACT.INVALID"
    where = {(e["file"], e["path"]) for e in problem["errors"]}
    assert ("buying/broken.yaml", "spec.fields[0].type") in where
    assert ("buying/broken.yaml", "spec.fields[0].name") in where
    conn = await asyncpg.connect(db_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM dap_control.artifacts") == 0
        assert await conn.fetchval("SELECT count(*) FROM dap_control.deployments") == 0
        assert await conn.fetchval("SELECT version FROM dap_control.snapshot_state") == 0
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param({"files": []}, 400, "SVC.REQUEST.MALFORMED", id="no-app"),
        pytest.param(
            {"app": "Bad Name", "files": [{"path": "a.yaml", "content": ""}]},
            400,
            "SVC.REQUEST.MALFORMED",
            id="bad-app-name",
        ),
        pytest.param(
            {"app": "a", "files": [{"path": "../etc/passwd", "content": ""}]},
            400,
            "SVC.REQUEST.MALFORMED",
            id="path-escape",
        ),
        pytest.param(
            {"app": "a", "files": [{"path": "a.yaml", "content": "***"}]},
            400,
            "SVC.REQUEST.MALFORMED",
            id="not-base64",
        ),
        pytest.param(
            {"app": "a", "files": [{"path": "run.sh", "content": ""}]},
            422,
            "SVC.ARTIFACT.INVALID",
            id="no-manifest",
        ),
        pytest.param(
            {"app": "a", "files": [{"path": "big.yaml", "content": base64.b64encode(b"#" * 2048).decode()}]},
            413,
            "SVC.ARTIFACT.TOO_LARGE",
            id="file-too-large",
        ),
    ],
)
async def test_bad_requests(
    start_control: Start, http: aiohttp.ClientSession, body: dict[str, object], status: int, code: str
) -> None:
    control = await start_control(limits=registration.Limits(max_file_bytes=1024, max_total_bytes=4096))
    async with http.post(f"{control.url}/v1/artifacts", json=body) as response:
        assert response.status == status, await response.text()
        assert (await response.json())["code"] == code


async def test_total_limit_applies_to_multipart(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control(limits=registration.Limits(max_file_bytes=1024, max_total_bytes=2048))
    form = aiohttp.FormData()
    form.add_field("app", "big")
    for index in range(4):
        form.add_field("file", b"#" * 1000, filename=f"f{index}.yaml")
    async with http.post(f"{control.url}/v1/artifacts", data=form) as response:
        assert response.status == 413
        assert (await response.json())["code"] == "SVC.ARTIFACT.TOO_LARGE"


async def test_snapshot_etag_and_304(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control()
    files = manifests(**{"ws.yaml": workspace_manifest("acme")})
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("shop", files)) as response:
        result = await response.json()
    async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "acme"}) as response:
        assert response.status == 200
        etag = response.headers["ETag"]
        snapshot = await response.json()
    assert snapshot["deployments"] == [
        {
            "workspace_id": "acme",
            "artifact_id": result["artifact_id"],
            "sha256": result["sha256"],
            "cluster_id": "local",
        }
    ]
    assert etag.startswith(f'"{snapshot["version"]}.')
    assert {"issued_at", "expires_at", "environment", "signature", "signing_key_id"} <= set(snapshot)
    keys = await _keys(http, control.url)
    _independent_verify(snapshot, keys[snapshot["signing_key_id"]])

    async with http.get(
        f"{control.url}/v1/snapshot?workspace=acme", headers={"If-None-Match": etag}
    ) as response:
        assert response.status == 304
        assert await response.read() == b""
    async with http.get(f"{control.url}/v1/snapshot?workspace=other") as response:
        assert (await response.json())["deployments"] == []

    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("shop", manifests())) as response:
        assert response.status == 200
    async with http.get(
        f"{control.url}/v1/snapshot?workspace=acme", headers={"If-None-Match": etag}
    ) as response:
        assert response.status == 200
        assert (await response.json())["version"] == snapshot["version"] + 1


async def test_304_answers_from_memory_while_the_database_is_gone(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    async with http.get(f"{control.url}/v1/snapshot") as response:
        etag = response.headers["ETag"]
    from dap.control.serving import http as control_http

    control.app[control_http.POOL].terminate()  # every connection closed: any query now fails
    async with http.get(f"{control.url}/v1/snapshot", headers={"If-None-Match": etag}) as response:
        assert response.status == 304
    async with http.get(f"{control.url}/health") as response:
        assert response.status == 503


async def test_unknown_artifact_and_route_are_problems(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    async with http.get(f"{control.url}/v1/artifacts/art-nope") as response:
        assert response.status == 404
        assert (await response.json())["code"] == "SVC.CONTROL.NOT_FOUND"
    async with http.get(f"{control.url}/v1/nothing") as response:
        assert response.status == 404
        assert response.content_type == "application/problem+json"


async def test_concurrent_registrations_serialise_per_app(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    url = f"{control.url}/v1/artifacts"

    async def post(files: dict[str, bytes], workspaces: list[str]) -> dict[str, object]:
        async with http.post(url, json=json_upload("race", files, workspaces)) as response:
            assert response.status == 200, await response.text()
            result: dict[str, object] = await response.json()
            return result

    same = await asyncio.gather(*(post(manifests(), [f"w{i}"]) for i in range(5)))
    assert {r["artifact_id"] for r in same} == {same[0]["artifact_id"]}
    assert sum(1 for r in same if r["created"]) == 1
    distinct = await asyncio.gather(
        *(post(manifests(**{"n.txt": str(i).encode()}), ["w0"]) for i in range(5))
    )
    assert sorted(int(str(r["version"])) for r in distinct) == [2, 3, 4, 5, 6]
    chain: dict[int, object] = {}
    for result in distinct:
        async with http.get(f"{url}/{result['artifact_id']}") as response:
            envelope = await response.json()
        chain[envelope["version"]] = envelope["prev_version"]
    assert chain == {2: 1, 3: 2, 4: 3, 5: 4, 6: 5}


async def test_snapshot_is_reissued_before_it_expires(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control(snapshot_ttl=timedelta(seconds=2))
    async with http.get(f"{control.url}/v1/snapshot") as response:
        first = await response.json()
        etag = response.headers["ETag"]
    await asyncio.sleep(1.1)  # past half the lifetime
    async with http.get(f"{control.url}/v1/snapshot", headers={"If-None-Match": etag}) as response:
        assert response.status == 200
        second = await response.json()
    assert second["version"] == first["version"]
    assert second["issued_at"] > first["issued_at"]
    assert second["expires_at"] > first["expires_at"]


async def test_raw_body_over_the_limit_is_413(start_control: Start, http: aiohttp.ClientSession) -> None:
    control = await start_control(limits=registration.Limits(max_file_bytes=1024, max_total_bytes=1024))
    body = b'{"app": "x", "files": [], "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    async with http.post(
        f"{control.url}/v1/artifacts", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 413
        assert (await r.json())["code"] == "SVC.ARTIFACT.TOO_LARGE"
