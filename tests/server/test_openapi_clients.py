"""Clients generated from the OpenAPI document a workspace serves (issue 40 row 23).

A document schemathesis accepts can still be refused by the generators people use: an array typed
only by ``minItems``/``maxItems`` (the audit trail's ``[before, after]``) made openapi-python-client
leave every ``_audit`` response out of its client, and a ``*/*`` upload body left the upload out.
So, for the served document of the procurement example, of the test catalog (every field type)
and of the surfaces schemathesis runs (files, an approval, jobs, notifications):

- openapi-python-client generates a client without a warning (nothing left out), and one client is
  imported and driven against the real server: create, list, find, update with ``If-Match``, a
  stale ``If-Match`` and a missing record answered as typed problem documents, the audit trail,
  an upload and its download, delete;
- openapi-generator (Java, its CLI jar from Maven Central: tools/openapi-generator/fetch.sh)
  validates the document and generates a Python client that imports; where java, mvn or the jar
  cannot be had the check skips saying why.

A file field whose ``storage.accept`` names its types (``scan``: image/png, application/pdf) is
documented with those types; openapi-python-client types only JSON, text and
``application/octet-stream`` and is told the rest by its ``content_type_overrides`` (docs/server.md).
The generated code goes under the test's temporary directory, never the repository.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dap import config
from dap.server.catalog import Catalog

from .conftest import Running, load, running, token
from .services_spec import install_handlers
from .test_schemathesis import PROCUREMENT, SURFACES

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_PYTHON_CLIENT = Path(sys.executable).parent / "openapi-python-client"
FETCH_GENERATOR = ROOT / "tools" / "openapi-generator" / "fetch.sh"
# the types a file field of SURFACES names (desk/doc's scan); every other body and answer is JSON
# or application/octet-stream, which openapi-python-client types by itself
FILE_TYPES = {"image/png": "application/octet-stream", "application/pdf": "application/octet-stream"}
CATALOGS = [
    pytest.param(lambda: Catalog.from_spec(config.load_spec(PROCUREMENT)), id="procurement"),
    pytest.param(load, id="every-field-type"),
    pytest.param(lambda: load(SURFACES), id="files-approvals-jobs-notifications"),
]


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The native handler of SURFACES' service action, so that its path is served and documented."""
    root = install_handlers(tmp_path_factory.mktemp("client-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@contextlib.asynccontextmanager
async def _serving(pg_server_dsn: str, catalog: Catalog) -> AsyncIterator[Running]:
    from tests.conftest import drop_database, new_database

    name, dsn = await new_database(pg_server_dsn)
    try:
        async with running(dsn, catalog) as srv:
            yield srv
    finally:
        await drop_database(pg_server_dsn, name)


async def _served(srv: Running, into: Path) -> Path:
    """The workspace's document as it serves it, written to ``into``/openapi.json."""
    async with srv.http.get(f"{srv.api}/default/api/openapi.json", headers=srv.auth()) as resp:
        assert resp.status == 200, await resp.text()
        document = await resp.json()
    path = into / "openapi.json"
    path.write_text(json.dumps(document))
    return path


async def _run(*args: str, seconds: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """A command's exit code and output, bounded in time (the server keeps answering meanwhile)."""
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        async with asyncio.timeout(seconds):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{args[0]} took more than {seconds} s") from None
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


async def _python_client(document: Path, out: Path, overrides: dict[str, str]) -> None:
    """openapi-python-client's client of ``document`` as package ``out.name``; fails on any warning
    (a warning is a response, a body or an operation left out of the client)."""
    if not OPENAPI_PYTHON_CLIENT.is_file():
        pytest.skip("openapi-python-client is not installed: `pip install -e '.[dev]'` (make install)")
    settings = out.parent / f"{out.name}.json"
    # no post hooks: the generated code is imported, not kept, so it needs no formatting
    settings.write_text(json.dumps({"post_hooks": [], "content_type_overrides": overrides}))
    code, said = await _run(
        str(OPENAPI_PYTHON_CLIENT),
        "generate",
        "--path",
        str(document),
        "--output-path",
        str(out),
        "--meta",
        "none",
        "--config",
        str(settings),
        seconds=120,
    )
    assert code == 0, said
    assert "Warning" not in said and "WARNING" not in said, said


@pytest.mark.parametrize("catalog", CATALOGS)
async def test_openapi_python_client_leaves_nothing_out(
    pg_server_dsn: str, catalog: Callable[[], Catalog], registered: None, tmp_path: Path
) -> None:
    async with _serving(pg_server_dsn, catalog()) as srv:
        document = await _served(srv, tmp_path)
    await _python_client(document, tmp_path / "client", FILE_TYPES)
    assert (tmp_path / "client" / "client.py").is_file()


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """Imports a module of a package generated under ``tmp_path``; forgets the package after."""
    sys.path.insert(0, str(tmp_path))
    names: set[str] = set()

    def module(name: str) -> Any:
        names.add(name.split(".")[0])
        return importlib.import_module(name)

    yield module
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] in names]:
        del sys.modules[name]


async def test_a_generated_python_client_drives_the_api(
    pg_server_dsn: str, registered: None, tmp_path: Path, generated: Callable[[str], Any]
) -> None:
    package = f"dap_client_{uuid.uuid4().hex[:8]}"
    async with _serving(pg_server_dsn, load(SURFACES)) as srv:
        await _python_client(await _served(srv, tmp_path), tmp_path / package, FILE_TYPES)
        generated(package)
        # the client's synchronous calls, as a script would make them, while the server answers here
        await asyncio.to_thread(_drive, generated, package, f"{srv.api}/default")


def _drive(generated: Callable[[str], Any], package: str, base_url: str) -> None:
    api = f"{package}.api.document"
    create, listing, find, update, delete, audit, upload, download = (
        generated(f"{api}.{name}")
        for name in (
            "create_desk_doc",
            "list_desk_doc",
            "find_desk_doc",
            "update_desk_doc",
            "delete_desk_doc",
            "audit_desk_doc",
            "upload_desk_doc_attachment",
            "download_desk_doc_attachment",
        )
    )
    models, types = generated(f"{package}.models"), generated(f"{package}.types")
    with generated(package).AuthenticatedClient(base_url=base_url, token=token()) as client:
        made = create.sync_detailed(client=client, body=models.DeskDocCreate(title="T", amount=1))
        assert made.status_code == 201, made.content
        record = made.parsed.data
        assert isinstance(record, models.DeskDoc) and isinstance(record.id, uuid.UUID)
        assert (record.title, record.amount, record.version) == ("T", 1, 1)

        page = listing.sync(client=client, count=True)
        assert isinstance(page, models.ListDeskDocResponse200), page
        assert [r.id for r in page.data] == [record.id] and page.total == 1

        found = find.sync(record.id, client=client)
        assert isinstance(found, models.FindDeskDocResponse200) and found.data.title == "T"

        changed = update.sync(record.id, client=client, body=models.DeskDocUpdate(amount=2), if_match='"1"')
        assert isinstance(changed, models.UpdateDeskDocResponse200), changed
        assert (changed.data.amount, changed.data.version) == (2, 2)

        # a stale If-Match and a missing record: problem documents, typed
        stale = update.sync(record.id, client=client, body=models.DeskDocUpdate(amount=3), if_match='"1"')
        assert isinstance(stale, models.Problem), stale
        assert (stale.status, stale.code) == (412, "SVC.VERSION.MISMATCH") and "version 2" in stale.detail
        missing = find.sync(uuid.uuid4(), client=client)
        assert isinstance(missing, models.Problem) and missing.status == 404, missing

        # the trail that openapi-python-client used to leave out: [before, after] typed as lists
        trail = audit.sync(record.id, client=client)
        assert isinstance(trail, models.AuditDeskDocResponse200), trail
        updated = [row for row in trail.data if row.action == "update"]
        assert updated and updated[0].changes.additional_properties == {"amount": [1, 2]}

        stored = upload.sync(
            record.id,
            client=client,
            body=types.File(payload=io.BytesIO(b"%PDF-1.7 bytes")),
            if_match='"2"',
            x_file_name="note.bin",
        )
        assert isinstance(stored, models.UploadDeskDocAttachmentResponse200), stored
        got = download.sync_detailed(record.id, client=client)
        assert got.status_code == 200 and got.content == b"%PDF-1.7 bytes"
        assert got.headers["Content-Type"] == "application/octet-stream"

        gone = delete.sync_detailed(record.id, client=client)
        assert gone.status_code == 204, gone.content
        missing = find.sync(record.id, client=client)
        assert isinstance(missing, models.Problem) and missing.status == 404


@pytest.fixture(scope="module")
def generator_jar() -> str:
    """openapi-generator's CLI jar, fetched once into ~/.cache/dap (skips saying why it cannot)."""
    try:
        done = subprocess.run(
            ["bash", str(FETCH_GENERATOR)], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.skip("openapi-generator-cli: `mvn dependency:get` took more than 600 s")
    if done.returncode != 0 or not done.stdout.strip():
        pytest.skip(f"openapi-generator-cli cannot be had here: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("catalog", CATALOGS)
async def test_openapi_generator_validates_and_generates(
    pg_server_dsn: str,
    catalog: Callable[[], Catalog],
    registered: None,
    generator_jar: str,
    tmp_path: Path,
) -> None:
    async with _serving(pg_server_dsn, catalog()) as srv:
        document = await _served(srv, tmp_path)
    java = ("java", "-Xss4m", "-jar", generator_jar)
    code, said = await _run(*java, "validate", "-i", str(document), seconds=180)
    assert code == 0, said  # warnings (an unused model) are recommendations, errors fail it
    out = tmp_path / "generated"
    code, said = await _run(
        *java,
        "generate",
        "-i",
        str(document),
        "-g",
        "python",
        "-o",
        str(out),
        "--package-name",
        "workspace_client",
        "--global-property",
        "apiTests=false,modelTests=false,apiDocs=false,modelDocs=false",
        seconds=300,
    )
    assert code == 0, said[-4000:]
    assert " ERROR " not in said, said[-4000:]
    code, said = await _run(
        sys.executable,
        "-c",
        "import workspace_client",
        seconds=120,
        env={**os.environ, "PYTHONPATH": str(out)},
    )
    assert code == 0, said[-4000:]
