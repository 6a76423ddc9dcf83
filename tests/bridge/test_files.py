"""File fields over REST on the local filesystem: streamed up and down, size and type limits from
``StorageSpec``, kept under the tenant, replaced, and removed with the record."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from .conftest import AppProcess, Bridged, bridged
from .test_invoke import item

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def files_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dap-files-") as tmp:
        before = os.environ.get("DAP_STATE_DIR")
        os.environ["DAP_STATE_DIR"] = tmp
        try:
            yield Path(tmp) / "files"
        finally:
            if before is None:
                os.environ.pop("DAP_STATE_DIR", None)
            else:
                os.environ["DAP_STATE_DIR"] = before


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, app_process: AppProcess, files_root: Path) -> AsyncIterator[Bridged]:
    async with bridged(pg_dsn, app_process) as b:
        yield b


async def put(
    srv: Bridged, record: dict[str, str], field: str, body: bytes, mime: str, ws: str = "default"
) -> tuple[int, dict[str, object]]:
    url = f"{srv.api}/{ws}/api/store/item/{record['id']}/_files/{field}"
    headers = {**srv.auth(), "Content-Type": mime, "X-File-Name": "guide.txt"}
    async with srv.http.put(url, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def get(
    srv: Bridged, record: dict[str, str], field: str, ws: str = "default"
) -> tuple[int, bytes, str]:
    url = f"{srv.api}/{ws}/api/store/item/{record['id']}/_files/{field}"
    async with srv.http.get(url, headers=srv.auth()) as resp:
        return resp.status, await resp.read(), resp.headers.get("Content-Type", "")


async def test_upload_download_replace_and_delete(srv: Bridged, files_root: Path) -> None:
    it = await item(srv)
    status, answer = await put(srv, it, "manual", b"hello " * 100, "text/plain")
    assert status == 200, answer
    data = answer["data"]
    assert isinstance(data, dict) and data["version"] == it["version"] + 1 and data["manual"]
    status, body, mime = await get(srv, it, "manual")
    assert (status, body, mime.split(";")[0]) == (200, b"hello " * 100, "text/plain")
    record_dir = next(files_root.glob(f"*/*/{it['id']}"))  # noqa: ASYNC240 -- a test reading its own temp dir
    status, answer = await put(srv, it, "manual", b"%PDF-1.4 second", "application/pdf")
    assert status == 200, answer
    assert (await get(srv, it, "manual"))[1] == b"%PDF-1.4 second"
    assert len([p for p in (record_dir / "manual").iterdir() if p.suffix != ".json"]) == 1  # the old one went
    status, _ = await srv.call("DELETE", f"item/{it['id']}")
    assert status == 204
    assert not record_dir.exists()


async def test_limits_and_refusals(srv: Bridged) -> None:
    it = await item(srv)
    status, answer = await put(srv, it, "manual", b"x" * 4096, "text/plain")
    assert status == 413 and answer["code"] == "SVC.FILE.TOO_LARGE", answer
    status, answer = await put(srv, it, "manual", b"GIF89a", "image/gif")
    assert status == 415, answer
    status, answer = await put(srv, it, "photo", b"x", "image/png")
    assert status == 501, answer
    status, answer = await put(srv, it, "sku", b"x", "text/plain")
    assert status == 404, answer
    assert (await get(srv, it, "manual"))[0] == 404  # nothing was stored
    status, answer = await srv.call("GET", f"item/{it['id']}")
    assert answer["data"]["manual"] is None and answer["data"]["version"] == it["version"]


async def test_another_workspace_cannot_reach_the_file(srv: Bridged) -> None:
    await srv.register("files-other")
    it = await item(srv)
    assert (await put(srv, it, "manual", b"secret", "text/plain"))[0] == 200
    assert (await get(srv, it, "manual", ws="files-other"))[0] == 404
    assert (await put(srv, it, "manual", b"overwrite", "text/plain", ws="files-other"))[0] == 404
    assert (await get(srv, it, "manual"))[1] == b"secret"


async def test_cascade_deleted_records_lose_their_files(srv: Bridged, files_root: Path) -> None:
    it, other = await item(srv), await item(srv)
    sheets = []
    for parent in (it, it, other):
        status, answer = await srv.call("POST", "sheet", {"item": parent["id"]})
        assert status == 201, answer
        sheets.append(answer["data"])
    for sheet in sheets:
        url = f"{srv.api}/default/api/store/sheet/{sheet['id']}/_files/scan"
        async with srv.http.put(url, data=b"scan", headers={**srv.auth(), "Content-Type": "image/png"}) as r:
            assert r.status == 200, await r.text()
    dirs = [next(files_root.glob(f"*/*/{s['id']}")) for s in sheets]  # noqa: ASYNC240 -- the test's temp dir
    status, _ = await srv.call("DELETE", f"item/{it['id']}")
    assert status == 204
    for sheet in sheets[:2]:  # cascaded with the item: records and bytes gone
        assert (await srv.call("GET", f"sheet/{sheet['id']}"))[0] == 404
    assert not dirs[0].exists() and not dirs[1].exists()
    assert dirs[2].exists()  # another item's sheet keeps its file
    assert (await srv.call("GET", f"sheet/{sheets[2]['id']}"))[0] == 200
