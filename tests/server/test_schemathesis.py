"""schemathesis against the OpenAPI document the server publishes: the server must keep its word.

For the procurement example, for the test catalog (every field type, masks, children,
extensions, lifecycle) and for :data:`SURFACES` (file fields, an approval-gated transition, an
async action's jobs, notifications, an entity exposing only some actions, accounting periods),
schemathesis generates requests from the document, bounded in examples, and checks every answer:
no 5xx, every status, content type, header and body as documented, and a 405 for every
undocumented method. The checks
that judge whether a request *should* have been accepted are left out: whether a relation points
at a record, or an If-Match names the current version, is the data's business, not the schema's.

schemathesis checks that a 405 carries ``Allow``, not what it lists: the tests after the run
check that every documented path answers an undocumented method with exactly its documented
methods, that every route the server serves is in the document, and that the rows a real
approval writes to the audit trail match the trail's documented schema.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dap import config
from dap.server.catalog import Catalog

from .conftest import Running, load, running, token
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "unsupported_method",
    )
)
EXAMPLES = 15
PROCUREMENT = Path(__file__).resolve().parents[2] / "examples" / "procurement"
SURFACES = {
    "desk/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: desk}
spec: {title: Desk}
""",
    "desk/doc.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: doc, module: desk}
spec:
  title: Document
  fields:
    - {name: title, type: string, required: true}
    - {name: amount, type: integer, default: 0, audited: true}
    - {name: reader, type: string}
    - {name: scan, type: file, storage: {max_bytes: 4096, accept: [image/png, application/pdf]}}
    - {name: attachment, type: file}
  actions:
    - {name: publish, audit: true}
    - {name: close, call: async, track: true}
  events:
    - name: created
      deliver:
        - channel: notification
          notification: {template: "New document {{ title }}", to: ["field:reader"]}
  state_machine:
    states: [draft, published, closed]
    initial: draft
    transitions:
      - name: publish
        from: draft
        to: published
        action: publish
        approval:
          steps:
            - {name: one, roles: [admin], display_fields: [title]}
      - {name: close, from: [draft, published], to: closed, action: close}
  expose: [{type: rest}]
""",
    "desk/tools.yaml": """
apiVersion: dap.io/v1
kind: Service
metadata: {name: tools, module: desk}
spec:
  title: Tools
  expose: [{type: rest}]
  actions:
    - name: echo
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: say, type: string}
""",
    "desk/archive.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: archive, module: desk}
spec:
  title: Archive
  fields:
    - {name: title, type: string}
    - {name: copy, type: file}
  expose: [{type: rest, actions: [list, find, create]}]
""",
    "desk/ledger.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: ledger, module: desk}
spec:
  title: Ledger line
  characteristic: transaction  # so the accounting-period and archive routes are documented and run
  lifecycle: true
  fields:
    - {name: posting_date, type: date, required: true}
    - {name: amount, type: integer}
  archive: {after: 30d, retain: 365d}
  expose: [{type: rest}]
""",
}


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The native handler of the service action in :data:`SURFACES` (an installed entry point)."""
    root = install_handlers(tmp_path_factory.mktemp("desk-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


async def _schemathesis(url: str, bearer: str, *extra: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        SCHEMATHESIS,
        "run",
        url,
        "--header",
        f"Authorization: Bearer {bearer}",
        "--checks",
        CHECKS,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        "20261124",
        "--generation-allow-x00",
        "false",
        "--generation-codec",
        "utf-8",
        "--request-timeout",
        "10",
        "--max-failures",
        "20",
        "--no-color",
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=360)  # a hang guard: examples bound it
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


@pytest.mark.parametrize(
    ("catalog", "extra"),
    [
        pytest.param(lambda: Catalog.from_spec(config.load_spec(PROCUREMENT)), (), id="procurement"),
        pytest.param(load, (), id="every-field-type"),
        # the plain record paths are the other two runs' business: this one runs the rest (bounded)
        pytest.param(
            lambda: load(SURFACES),
            ("--exclude-path-regex", r"^/api/desk/\w+/\{id\}$"),
            id="files-approvals-jobs-notifications",
        ),
    ],
)
async def test_the_server_answers_as_its_openapi_document_says(
    pg_server_dsn: str, catalog: object, extra: tuple[str, ...], registered: None
) -> None:
    from tests.conftest import drop_database, new_database

    name, dsn = await new_database(pg_server_dsn)
    try:
        async with running(dsn, catalog()) as srv:  # type: ignore[operator]
            code, out = await _schemathesis(f"{srv.api}/default/api/openapi.json", token(), *extra)
    finally:
        await drop_database(pg_server_dsn, name)
    assert code == 0, out[-6000:]
    assert "0 failures" in out or " passed" in out, out[-3000:]


# --- what schemathesis does not check ----------------------------------------------------------

METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE", "OPTIONS", "TRACE")


async def _document(srv: Running) -> dict[str, Any]:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json", headers=srv.auth()) as resp:
        assert resp.status == 200
        found: dict[str, Any] = await resp.json()
        return found


def _concrete(path: str) -> str:
    """A documented path with its parameters filled in (a uuid where the record's id goes)."""
    return "/default" + re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)


@pytest.fixture
async def surfaces(pg_server_dsn: str, registered: None) -> Any:
    from tests.conftest import drop_database, new_database

    name, dsn = await new_database(pg_server_dsn)
    try:
        async with running(dsn, load(SURFACES)) as srv:
            yield srv
    finally:
        await drop_database(pg_server_dsn, name)


async def test_every_undocumented_method_is_405_allowing_exactly_the_documented_ones(
    surfaces: Running,
) -> None:
    document = await _document(surfaces)
    wrong = []
    for path, item in document["paths"].items():
        documented = {m.upper() for m in item if m != "parameters"}
        for method in sorted(set(METHODS) - documented):
            async with surfaces.http.request(
                method, surfaces.api + _concrete(path), headers=surfaces.auth()
            ) as resp:
                allow = {m.strip() for m in resp.headers.get("Allow", "").split(",")} - {"", "HEAD"}
                if (resp.status, allow) != (405, documented):
                    wrong.append(f"{method} {path}: {resp.status} {sorted(allow)}, not {sorted(documented)}")
    assert not wrong, "\n".join(wrong)


async def test_every_route_served_is_documented(surfaces: Running) -> None:
    paths = set((await _document(surfaces))["paths"])
    for path in (
        "/api/desk/doc/{id}/_files/scan",
        "/api/desk/doc/{id}/_files/attachment",
        "/api/desk/archive/{id}/_files/copy",
        "/api/_notifications",
        "/api/_notifications/read",
        "/api/desk/doc/_jobs/{job}",
        "/api/desk/doc/{id}/_approvals",
        "/api/_approvals/{id}/approve",
        "/api/desk/tools/echo",
        "/api/_periods",
        "/api/_periods/{id}/start_closing",
        "/api/_periods/{id}/close",
        "/api/_periods/{id}/reopen",
        "/api/_periods/{id}/_audit",
        "/api/_periods/{id}/balances",
        "/api/_archive/run",
        "/api/_archive/desk/ledger",
        "/api/_archive/desk/ledger/{id}",
        "/api/_archive/desk/ledger/{id}/hold",
    ):
        assert path in paths, path
    document = await _document(surfaces)
    files = document["paths"]["/api/desk/doc/{id}/_files/scan"]
    assert set(files["put"]["requestBody"]["content"]) == {"image/png", "application/pdf"}
    assert set(
        document["paths"]["/api/desk/doc/{id}/_files/attachment"]["put"]["requestBody"]["content"]
    ) == {"application/octet-stream"}  # any type; a media range is no type to send (issue 40 row 23)
    assert set(document["paths"]["/api/desk/archive/{id}/_files/copy"]) == {"parameters", "get"}  # no update


async def test_a_real_approvals_audit_rows_and_notifications_match_their_documented_schemas(
    surfaces: Running,
) -> None:
    document = await _document(surfaces)
    srv, auth = surfaces, surfaces.auth()
    url = f"{srv.api}/default/api/desk/doc"
    async with srv.http.post(url, json={"title": "T", "reader": "alice"}, headers=auth) as resp:
        assert resp.status == 201, await resp.text()
        record = (await resp.json())["data"]
    async with srv.http.post(f"{url}/{record['id']}/publish", json={}, headers=auth) as resp:
        assert resp.status == 202, await resp.text()
        approval = (await resp.json())["approval"]
    async with srv.http.post(
        f"{srv.api}/default/api/_approvals/{approval['id']}/approve",
        json={"comment": "ok"},
        headers=srv.auth(sub="u-2", username="bob"),  # not the requester
    ) as resp:
        assert resp.status == 200, await resp.text()
    answers = {}
    for path, documented in (
        (f"/api/desk/doc/{record['id']}/_audit", "/api/desk/doc/{id}/_audit"),
        (f"/api/desk/doc/{record['id']}/_approvals", "/api/desk/doc/{id}/_approvals"),
        ("/api/_notifications?all=true", "/api/_notifications"),
    ):
        async with srv.http.get(f"{srv.api}/default{path}", headers=auth) as resp:
            assert resp.status == 200, await resp.text()
            answers[documented] = body = await resp.json()
        schema = document["paths"][documented]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]
        jsonschema.validate(body, {**schema, "components": document["components"]})
    assert {row["action"] for row in answers["/api/desk/doc/{id}/_audit"]["data"]} >= {"approval.requested"}
    assert answers["/api/_notifications"]["data"], "the created event notified its reader"


async def test_an_upload_replaces_a_file_value_the_store_never_made(surfaces: Running) -> None:
    """schemathesis found it: a JSON body may set a file field's column to any string; the upload
    that replaces it then removed "the old file" by that value and answered 500 after committing."""
    srv, auth = surfaces, surfaces.auth()
    url = f"{srv.api}/default/api/desk/doc"
    async with srv.http.post(url, json={"title": "T", "attachment": "\U000e882f/../x"}, headers=auth) as resp:
        assert resp.status == 201, await resp.text()
        record = (await resp.json())["data"]
    async with srv.http.put(f"{url}/{record['id']}/_files/attachment", data=b"bytes", headers=auth) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["data"]["attachment"] != record["attachment"]
    async with srv.http.get(f"{url}/{record['id']}/_files/attachment", headers=auth) as resp:
        assert (resp.status, await resp.read()) == (200, b"bytes")
