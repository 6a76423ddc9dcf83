"""Signing policies: approvals (``dap.config.approvals``) and ``dap control policy`` on a real control."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from dap.config import approvals, canonical
from dap.control.trust import signing
from tests.control.conftest import Start, json_upload, manifests
from tests.control.test_cli import run, write_spec
from tests.control.test_tlog import get

SHA = "ab" * 32


def keys(n: int) -> list[signing.Signer]:
    return [signing.Signer.generate() for _ in range(n)]


def seed(signer: signing.Signer) -> bytes:
    return bytes.fromhex(signer.seed_hex())


def test_only_valid_distinct_approvals_by_policy_keys_count() -> None:
    a, b, c, stranger = keys(4)
    policy = {s.key_id: s.public_key for s in (a, b, c)}
    one = approvals.approve(seed(a), "shop", SHA)
    assert approvals.approved_by([one], policy, "shop", SHA) == [one]
    assert approvals.approved_by([one, one], policy, "shop", SHA) == [one]  # a key counts once
    assert approvals.approved_by([approvals.approve(seed(stranger), "shop", SHA)], policy, "shop", SHA) == []
    assert approvals.approved_by([one], policy, "blog", SHA) == []  # approves another app
    assert approvals.approved_by([one], policy, "shop", "cd" * 32) == []  # or other content
    forged = {**one, "signature": "00" * 64}
    garbage = [forged, {"key_id": b.key_id}, "x", {"key_id": c.key_id, "signature": "zz"}]
    assert approvals.approved_by(garbage, policy, "shop", SHA) == []
    assert approvals.approved_by("nope", policy, "shop", SHA) == []
    two = approvals.approve(seed(b), "shop", SHA)
    assert len(approvals.approved_by([one, two, forged], policy, "shop", SHA)) == 2


async def test_a_registration_short_of_the_threshold_is_refused_and_stores_nothing(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str, tmp_path: Path
) -> None:
    control = await start_control()
    a, b, c = keys(3)
    policy = ["--key", a.public_key.hex(), "--key", b.public_key.hex(), "--key", c.public_key.hex()]
    code, out, err = await run(
        "control", "policy", "set", "--app", "shop", *policy, "--threshold", "2", "--db", db_dsn
    )
    assert code == 0, err
    assert json.loads(out)["threshold"] == 2
    code, _, err = await run(
        "control", "policy", "set", "--app", "shop", *policy, "--threshold", "4", "--db", db_dsn
    )
    assert code == 1 and "between 1 and the number of keys (3)" in err

    files = manifests()
    digest = canonical.aggregate_sha256({p: canonical.file_sha256(x) for p, x in files.items()})
    _, head = await get(http, f"{control.url}/v1/log/head")
    body = json_upload("shop", files, ["acme"])
    body["approvals"] = [approvals.approve(seed(a), "shop", digest)]
    async with http.post(f"{control.url}/v1/artifacts", json=body) as response:
        problem = await response.json()
        assert response.status == 422, problem
    assert problem["code"] == "SVC.POLICY.REFUSED"
    assert "needs 2 approval(s)" in problem["detail"] and "1 valid of 1 given" in problem["detail"]
    _, after = await get(http, f"{control.url}/v1/log/head")
    assert after["tree_size"] == head["tree_size"]  # nothing logged, nothing stored
    _, snapshot = await get(http, f"{control.url}/v1/snapshot")
    assert snapshot["deployments"] == []

    body["approvals"].append(approvals.approve(seed(c), "shop", digest))
    async with http.post(f"{control.url}/v1/artifacts", json=body) as response:
        answer = await response.json()
        assert response.status == 200, answer
    async with http.get(f"{control.url}/v1/artifacts/{answer['artifact_id']}") as response:
        envelope = await response.json()
    assert sorted(x["key_id"] for x in envelope["approvals"]) == sorted([a.key_id, c.key_id])

    # the author's one step: dap register --approve-with KEYFILE (twice)
    for signer, name in ((a, "a.key"), (b, "b.key")):
        signer.save(tmp_path / name)
    spec = write_spec(tmp_path / "shop", {"v2.txt": b"2"})
    args = ("register", str(spec), "--control-url", control.url, "--app", "shop")
    code, _, err = await run(*args, "--approve-with", str(tmp_path / "a.key"))
    assert code == 1 and "needs 2 approval(s)" in err
    code, out, err = await run(
        *args, "--approve-with", str(tmp_path / "a.key"), "--approve-with", str(tmp_path / "b.key")
    )
    assert code == 0, err
    code, out, _ = await run(
        "control",
        "policy",
        "approve",
        "--key-file",
        str(tmp_path / "a.key"),
        "--app",
        "shop",
        "--dir",
        str(spec),
    )
    assert code == 0 and json.loads(out)["key_id"] == a.key_id

    code, out, _ = await run("control", "policy", "show", "--db", db_dsn)
    assert [json.loads(line)["app"] for line in out.splitlines()] == ["shop"]
    _, entries = await get(http, f"{control.url}/v1/log/entries", app="shop")
    assert [e["entry"]["type"] for e in entries["entries"]][:1] == ["policy"]
    code, _, _ = await run("control", "policy", "remove", "--app", "shop", "--db", db_dsn)
    assert code == 0
    code, _, err = await run("control", "policy", "show", "--app", "shop", "--db", db_dsn)
    assert code == 1 and "has no policy" in err
