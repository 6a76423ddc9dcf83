"""The commands, run as real subprocesses against servers on loopback."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp

from dap.control.trust import signing
from tests.control.conftest import ENTITY, MODULE, Start, json_upload, manifests

DAP = str(Path(sys.executable).parent / "dap")


async def run(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        DAP, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def write_spec(root: Path, extra: dict[str, bytes] | None = None) -> Path:
    for path, content in {
        "buying/module.yaml": MODULE,
        "buying/supplier.yaml": ENTITY,
        **(extra or {}),
    }.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return root


async def test_register_prints_artifact_and_honours_dapignore(
    start_control: Start, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    control = await start_control()
    spec = write_spec(
        tmp_path / "shop", {"secret.env": b"TOKEN=1", ".dapignore": b"*.env\n", "app/x.js": b"1"}
    )
    code, out, err = await run("register", str(spec), "--control-url", control.url, "--workspace", "acme")
    assert code == 0, err
    lines = dict(line.split(":", 1) for line in out.strip().splitlines())
    artifact_id = lines["artifact_id"].strip()
    assert lines["version"].strip() == "1"
    assert "workspace acme -> local" in err
    async with http.get(f"{control.url}/v1/artifacts/{artifact_id}") as response:
        envelope = await response.json()
    assert envelope["app"] == "shop"
    assert sorted(f["path"] for f in envelope["files"]) == [
        "app/x.js",
        "buying/module.yaml",
        "buying/supplier.yaml",
    ]


async def test_register_shows_progress_for_large_uploads(start_control: Start, tmp_path: Path) -> None:
    control = await start_control()
    spec = write_spec(tmp_path / "big", {"assets/blob.bin": bytes(3 * 1024 * 1024)})
    code, _, err = await run("register", str(spec), "--control-url", control.url, "--app", "big")
    assert code == 0, err
    assert "(100%)" in err


async def test_register_reports_every_error_and_exits_1(start_control: Start, tmp_path: Path) -> None:
    control = await start_control()
    spec = write_spec(
        tmp_path / "bad", {"buying/x.yaml": b"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: x}\n"}
    )
    code, _, err = await run("register", str(spec), "--control-url", control.url)
    assert code == 1
    assert "registration refused (422)" in err
    assert "buying/x.yaml#1" in err


async def test_register_unreachable_control(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "s")
    code, _, err = await run("register", str(spec), "--control-url", "http://127.0.0.1:9")
    assert code == 1
    assert "cannot reach the control plane" in err


async def test_key_generate_and_show(tmp_path: Path) -> None:
    key_file = tmp_path / "signing.key"
    code, out, _ = await run("control", "key", "generate", "--out", str(key_file))
    assert code == 0
    generated = json.loads(out)
    code, out, _ = await run("control", "key", "show", str(key_file))
    shown = json.loads(out)
    assert shown == {k: generated[k] for k in ("key_id", "public_key", "algorithm")}
    assert signing.Signer.load(key_file).key_id == shown["key_id"]
    code, _, err = await run("control", "key", "generate", "--out", str(key_file))
    assert code == 1
    assert "refusing to overwrite" in err


async def test_serve_refuses_to_start_without_a_key() -> None:
    code, _, err = await run("control", "serve", "--mode", "region", "--db", "postgresql://127.0.0.1:9/x")
    assert code == 2
    assert "needs --signing-key" in err


async def test_revoke_falls_back_to_the_previous_version(
    start_control: Start, http: aiohttp.ClientSession, db_dsn: str
) -> None:
    control = await start_control()
    url = f"{control.url}/v1/artifacts"
    async with http.post(url, json=json_upload("shop", manifests(), ["acme"])) as response:
        first = await response.json()
    async with http.post(url, json=json_upload("shop", manifests(**{"v2.txt": b"2"}))) as response:
        second = await response.json()
    code, out, err = await run("control", "revoke", second["artifact_id"], "--db", db_dsn)
    assert code == 0, err
    assert json.loads(out)["moved"] == ["acme"]

    async def snapshot_artifacts() -> list[str]:
        async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "acme"}) as response:
            return [d["artifact_id"] for d in (await response.json())["deployments"]]

    for _ in range(100):  # the running server learns of it through LISTEN/NOTIFY
        if await snapshot_artifacts() == [first["artifact_id"]]:
            break
        await asyncio.sleep(0.05)
    assert await snapshot_artifacts() == [first["artifact_id"]]
    async with http.get(f"{url}/{second['artifact_id']}") as response:
        assert response.status == 410
    code, _, err = await run("control", "revoke", "art-unknown", "--db", db_dsn)
    assert code == 1
    assert "does not exist" in err


async def test_register_without_app_keeps_the_app_a_workspace_is_bound_to(
    start_control: Start, http: aiohttp.ClientSession, tmp_path: Path, db_dsn: str
) -> None:
    """A second directory (another name) registered for the same workspace without --app is the
    next version of the workspace's app, so revoking it falls back to the first; only an explicit
    --app moves the workspace to another app."""
    control = await start_control()

    def fields(out: str) -> dict[str, str]:
        return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.strip().splitlines())}

    first_dir = write_spec(tmp_path / "shop")
    code, out, err = await run(
        "register", str(first_dir), "--control-url", control.url, "--workspace", "acme"
    )
    assert code == 0, err
    first = fields(out)
    assert (first["app"], first["version"]) == ("shop", "1")

    second_dir = write_spec(tmp_path / "shop-next", {"notes.txt": b"v2"})
    code, out, err = await run(
        "register", str(second_dir), "--control-url", control.url, "--workspace", "acme"
    )
    assert code == 0, err
    second = fields(out)
    assert (second["app"], second["version"]) == ("shop", "2"), "the bound app is kept and versions chain"
    assert "workspace acme is bound to app 'shop'" in err and "--app shop-next" in err

    code, out, err = await run("control", "revoke", second["artifact_id"], "--db", db_dsn)
    assert code == 0, err
    assert json.loads(out)["moved"] == ["acme"], "revoke falls back to version 1 of the same app"

    code, out, err = await run(
        "register", str(second_dir), "--control-url", control.url, "--workspace", "acme", "--app", "other"
    )
    assert code == 0, err
    moved = fields(out)
    assert (moved["app"], moved["version"]) == ("other", "1")
    assert "is bound to app" not in err
    async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "acme"}) as response:
        deployments = (await response.json())["deployments"]
    assert [d["artifact_id"] for d in deployments] == [moved["artifact_id"]]


async def test_register_without_app_refuses_workspaces_of_different_apps(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    url = f"{control.url}/v1/artifacts"
    for app, ws in (("one", "acme"), ("two", "globex")):
        async with http.post(url, json=json_upload(app, manifests(), [ws])) as response:
            assert response.status == 200, await response.text()
    body = json_upload("three", manifests(**{"x.txt": b"x"}), ["acme", "globex"])
    body["default_app"] = body.pop("app")
    async with http.post(url, json=body) as response:
        problem = await response.json()
        assert response.status == 409, problem
    assert problem["code"] == "SVC.ARTIFACT.APP_AMBIGUOUS"
    assert "acme (app 'one'), globex (app 'two')" in problem["detail"]
