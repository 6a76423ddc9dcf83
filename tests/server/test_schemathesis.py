"""schemathesis against the OpenAPI document the server publishes: the server must keep its word.

For the procurement example and for the test catalog (every field type, masks, children,
extensions, lifecycle), schemathesis generates requests from the document, bounded in examples,
and checks every answer: no 5xx, every status, content type, header and body as documented, and
a 405's ``Allow`` listing exactly the documented methods. The checks that judge whether a request
*should* have been accepted are left out: whether a relation points at a record, or an If-Match
names the current version, is the data's business, not the schema's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dap import config
from dap.server.catalog import Catalog

from .conftest import load, running, token

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


async def _schemathesis(url: str, bearer: str) -> tuple[int, str]:
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
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=240)
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


@pytest.mark.parametrize(
    "catalog",
    [
        pytest.param(lambda: Catalog.from_spec(config.load_spec(PROCUREMENT)), id="procurement"),
        pytest.param(load, id="every-field-type"),
    ],
)
async def test_the_server_answers_as_its_openapi_document_says(pg_server_dsn: str, catalog: object) -> None:
    from tests.conftest import drop_database, new_database

    name, dsn = await new_database(pg_server_dsn)
    try:
        async with running(dsn, catalog()) as srv:  # type: ignore[operator]
            code, out = await _schemathesis(f"{srv.api}/default/api/openapi.json", token())
    finally:
        await drop_database(pg_server_dsn, name)
    assert code == 0, out[-6000:]
    assert "0 failures" in out or " passed" in out, out[-3000:]
