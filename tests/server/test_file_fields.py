"""File fields follow the rules of a PATCH of that field, and are served so they cannot run.

The table sends the same change twice, once as ``PATCH {field: …}`` and once as ``PUT
…/_files/{field}``, for every rule a PATCH of the field obeys (the field's permission, the
``update`` permission, ``expose``, draft-only documents, row scope, ``If-Match``) and asserts that
both answer the same status and code. Then: what a download is served as (stored XSS), the default
size limit, and the ``updated`` event and audit row an upload writes like a PATCH.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server.web import files

from .conftest import Running, load, running, token

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "vault/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: vault}
spec: {title: Vault}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: [vault.paper.create, vault.paper.update, vault.paper.find, vault.paper.list]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: keeper}
spec:
  includes: [clerk]
  permissions: [vault.paper.see_seal]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: reader}
spec:
  permissions: [vault.paper.find, vault.paper.list]
""",
    "vault/paper.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: paper, module: vault}
spec:
  lifecycle: true
  fields:
    - {name: title, type: string}
    - {name: region, type: string}
    - {name: scan, type: file}
    - {name: seal, type: file, required_permission: vault.paper.see_seal}
  actions:
    - {name: create, required_permission: vault.paper.create}
    - {name: update, required_permission: vault.paper.update}
    - {name: find, required_permission: vault.paper.find}
    - {name: list, required_permission: vault.paper.list}
  filters:
    - {field: region, from: session, attr: regions, op: in}
  expose: [{type: rest}]
""",
    "vault/archive.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: archive, module: vault}
spec:
  fields:
    - {name: title, type: string}
    - {name: scan, type: file}
  expose: [{type: rest, actions: [list, find, create]}]
""",
    "vault/poster.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: poster, module: vault}
spec:
  fields:
    - {name: title, type: string}
    - {name: art, type: file}
  auth: {required: false}
  expose: [{type: rest}]
""",
}
V = "/default/api/vault"
MAX_FILE = 64 * 1024


def bearer(roles: list[str], **attrs: Any) -> dict[str, str]:
    claims: dict[str, Any] = {"roles": roles}
    if attrs:
        claims["attrs"] = attrs
    return {"Authorization": f"Bearer {token(**claims)}"}


ADMIN = bearer(["admin"])
CLERK_NORTH = bearer(["clerk"], regions=["north"])
KEEPER = bearer(["keeper"], regions=["north"])
READER = bearer(["reader"], regions=["north"])


@pytest.fixture(scope="module")
def state_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dap-files-") as tmp:
        before = os.environ.get("DAP_STATE_DIR")
        os.environ["DAP_STATE_DIR"] = tmp
        try:
            yield Path(tmp)
        finally:
            if before is None:
                os.environ.pop("DAP_STATE_DIR", None)
            else:
                os.environ["DAP_STATE_DIR"] = before


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, state_dir: Path) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(SPEC), max_file_bytes=MAX_FILE) as r:
        await r.register("default")
        yield r


async def send(
    srv: Running, method: str, path: str, headers: dict[str, str], data: bytes | None = None
) -> tuple[int, Any, Any]:
    async with srv.http.request(method, srv.api + path, data=data, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status < 500, raw
        body = json.loads(raw) if resp.content_type.endswith("json") and raw else raw
        return resp.status, body, resp.headers


async def create(srv: Running, entity: str, body: dict[str, Any], *, submit: bool = False) -> dict[str, Any]:
    query = "?submit=true" if submit else ""
    status, answer, _ = await send(
        srv,
        "POST",
        f"{V}/{entity}{query}",
        {**ADMIN, "Content-Type": "application/json"},
        json.dumps(body).encode(),
    )
    assert status == 201, answer
    return answer["data"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Case:
    entity: str
    field: str
    headers: dict[str, str]
    status: int
    code: str | None = None
    submitted: bool = False
    region: str = "north"
    if_match: str | None = None


CASES = [
    pytest.param(Case("paper", "scan", CLERK_NORTH, 200), id="allowed"),
    pytest.param(Case("paper", "seal", CLERK_NORTH, 403, "SVC.AUTH.FORBIDDEN"), id="field-permission"),
    pytest.param(Case("paper", "seal", KEEPER, 200), id="field-permission-held"),
    pytest.param(Case("paper", "scan", READER, 403, "SVC.AUTH.FORBIDDEN"), id="no-update-permission"),
    pytest.param(Case("archive", "scan", ADMIN, 405, "SVC.ACTION.NOT_EXPOSED"), id="update-not-exposed"),
    pytest.param(
        Case("paper", "scan", ADMIN, 409, "SVC.DOC.UPDATE_NOT_DRAFT", submitted=True), id="submitted-document"
    ),
    pytest.param(
        Case("paper", "scan", CLERK_NORTH, 403, "SVC.AUTH.ROW_SCOPE", region="south"), id="row-scope"
    ),
    pytest.param(
        Case("paper", "scan", ADMIN, 412, "SVC.VERSION.MISMATCH", if_match='"7"'), id="stale-if-match"
    ),
    pytest.param(Case("paper", "scan", ADMIN, 200, if_match='"1"'), id="current-if-match"),
]


@pytest.mark.parametrize("case", CASES)
async def test_an_upload_obeys_the_rules_of_a_patch_of_its_field(srv: Running, case: Case) -> None:
    body = {"title": "t"} | ({"region": case.region} if case.entity == "paper" else {})
    answers = []
    for how in ("PATCH", "PUT"):
        record = await create(srv, case.entity, body, submit=case.submitted)
        headers = dict(case.headers)
        if case.if_match is not None:
            headers["If-Match"] = case.if_match
        if how == "PATCH":
            patch = json.dumps({case.field: "0123456789abcdef"}).encode()
            sent = await send(
                srv,
                "PATCH",
                f"{V}/{case.entity}/{record['id']}",
                {**headers, "Content-Type": "application/json"},
                patch,
            )
        else:
            sent = await send(
                srv,
                "PUT",
                f"{V}/{case.entity}/{record['id']}/_files/{case.field}",
                {**headers, "Content-Type": "text/plain"},
                b"hello",
            )
        status, answer, _ = sent
        code = answer.get("code") if isinstance(answer, dict) and status >= 400 else None
        answers.append((status, code))
        _, after, _ = await send(srv, "GET", f"{V}/{case.entity}/{record['id']}", ADMIN)
        assert after["data"]["version"] == record["version"] + (status == 200), (how, answer)
    assert answers[0] == answers[1] == (case.status, case.code), answers


async def test_an_upload_is_audited_and_emits_updated_like_a_patch(srv: Running, pg_dsn: str) -> None:
    record = await create(srv, "paper", {"title": "evented", "region": "north"})
    status, answer, headers = await send(
        srv, "PUT", f"{V}/paper/{record['id']}/_files/scan", {**ADMIN, "Content-Type": "text/plain"}, b"x"
    )
    assert status == 200 and headers["ETag"] == '"2"', answer
    conn = await asyncpg.connect(pg_dsn)
    try:
        events = await conn.fetch(
            "SELECT event, payload FROM dap.outbox WHERE record_id = $1::uuid ORDER BY id",
            record["id"],
        )
    finally:
        await conn.close()
    assert [e["event"] for e in events] == ["created", "updated"]
    payload = json.loads(events[1]["payload"])
    assert payload["changed"] == ["scan"] and payload["record"]["version"] == 2


@pytest.mark.parametrize(
    ("mime", "disposition"),
    [
        pytest.param("text/html", "attachment", id="html"),
        pytest.param("image/svg+xml", "attachment", id="svg"),
        pytest.param("application/xhtml+xml", "attachment", id="xhtml"),
        pytest.param("application/pdf", "attachment", id="pdf"),
        pytest.param("image/png", "inline", id="png"),
    ],
)
async def test_a_stored_file_never_runs_on_the_ui_origin(srv: Running, mime: str, disposition: str) -> None:
    poster = await create(srv, "poster", {"title": "xss"})
    path = f"{V}/poster/{poster['id']}/_files/art"
    payload = b"<script>alert(document.domain)</script>"
    headers = {**ADMIN, "Content-Type": mime, "X-File-Name": 'evil"name.html'}
    status, answer, _ = await send(srv, "PUT", path, headers, payload)
    assert status == 200, answer
    async with srv.http.get(srv.api + path) as resp:  # anonymous: auth.required is false
        assert resp.status == 200 and await resp.read() == payload
        assert resp.headers["Content-Disposition"].split(";")[0] == disposition
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Content-Security-Policy"] == "sandbox"
        assert "\r" not in resp.headers["Content-Disposition"]


@pytest.mark.parametrize("mime", ["*/*", "image/*"])
async def test_a_media_range_is_no_files_type(srv: Running, mime: str) -> None:
    """A generated client sends the document's content key as the type (issue 40 row 23): a range
    stored as the file's type would be answered as its Content-Type. 415, naming what to send."""
    poster = await create(srv, "poster", {"title": "range"})
    path = f"{V}/poster/{poster['id']}/_files/art"
    status, answer, _ = await send(srv, "PUT", path, {**ADMIN, "Content-Type": mime}, b"bytes")
    assert (status, answer["code"]) == (415, "SVC.FILE.TYPE"), answer
    assert "application/octet-stream" in answer["detail"], answer
    _, after, _ = await send(srv, "GET", f"{V}/poster/{poster['id']}", ADMIN)
    assert after["data"]["art"] is None and after["data"]["version"] == poster["version"]


async def test_the_disposition_keeps_the_name_and_quotes_nothing_unsafe() -> None:
    assert files.disposition("image/JPEG", "") == "inline"
    got = files.disposition("text/html", 'a"b\\c é.html')
    assert got == "attachment; filename=\"a_b_c _.html\"; filename*=UTF-8''a%22b%5Cc%20%C3%A9.html"


async def test_a_file_field_without_max_bytes_takes_the_default_limit(srv: Running, state_dir: Path) -> None:
    record = await create(srv, "paper", {"title": "big", "region": "north"})
    path = f"{V}/paper/{record['id']}/_files/scan"
    status, answer, _ = await send(srv, "PUT", path, {**ADMIN, "Content-Type": "text/plain"}, b"x" * MAX_FILE)
    assert status == 200, answer

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused while streaming
        for _ in range(MAX_FILE // 1024 + 8):
            yield b"y" * 1024

    headers = {**ADMIN, "Content-Type": "text/plain"}
    async with srv.http.put(srv.api + path, data=chunks(), headers=headers) as resp:
        problem = await resp.json()
        assert (resp.status, problem["code"]) == (413, "SVC.FILE.TOO_LARGE"), problem
    status, answer, _ = await send(
        srv, "PUT", path, {**ADMIN, "Content-Type": "text/plain"}, b"z" * (MAX_FILE + 1)
    )
    assert (status, answer["code"]) == (413, "SVC.FILE.TOO_LARGE")
    _, body, _ = await send(srv, "GET", path, ADMIN)
    assert body == b"x" * MAX_FILE  # the refused uploads changed nothing
    leftovers = [p for p in state_dir.rglob("*") if p.name.endswith(".part")]  # noqa: ASYNC240
    assert leftovers == []
