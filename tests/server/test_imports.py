"""CSV import (``POST …/{entity}/_import``) follows the rules of the verbs its rows stand for.

The table sends the same change twice, once as the REST verb (``POST`` for a new record,
``PATCH`` for one the row names by natural key or ``id``) and once as a one-row import, for
every rule those verbs obey (the create and update permissions, ``expose``, field guards, row
scope, ``If-Match``, draft-only documents, validation), and asserts that both meet the same
refusal: a permission refusal (405, 403) is the import's own status and code; any other is a
422 ``SVC.IMPORT.ROWS`` whose problem carries the verb's code. Nothing is written on a refusal.
Then: the dialect (malformed files name line and column and import nothing), the counts, the
oracle of a guarded field, and a list's export imported back (``ui/test/csv-vectors.json``, the
cells the UI writes for each value, shared with the UI's own test of its writer).
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap.server.storage import tables, workspaces
from dap.server.web import imports
from dap.server.workflows import csvdialect, seeding, seeds

from .conftest import Running, load, running, token

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "depot/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: depot}
spec: {title: Depot}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: [depot.item.create, depot.item.update, depot.item.find, depot.item.list]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: keeper}
spec:
  includes: [clerk]
  permissions: [depot.item.see_secret]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: reader}
spec:
  permissions: [depot.item.find, depot.item.list]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: adder}
spec:
  permissions: [depot.item.create, depot.item.find, depot.item.list]
""",
    "depot/item.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: depot}
spec:
  fields:
    - {name: code, type: string, natural_key: true, required: true}
    - {name: title, type: string}
    - {name: region, type: string}
    - {name: secret, type: string, required_permission: depot.item.see_secret}
    - {name: qty, type: integer}
  actions:
    - {name: create, required_permission: depot.item.create}
    - {name: update, required_permission: depot.item.update}
    - {name: find, required_permission: depot.item.find}
    - {name: list, required_permission: depot.item.list}
  filters:
    - {field: region, from: session, attr: regions, op: in}
  expose: [{type: rest}]
""",
    "depot/ledger.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: ledger, module: depot}
spec:
  fields:
    - {name: code, type: string, natural_key: true, required: true}
    - {name: title, type: string}
  expose: [{type: rest, actions: [list, find, create]}]
""",
    "depot/fixed.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: fixed, module: depot}
spec:
  fields:
    - {name: code, type: string, natural_key: true, required: true}
    - {name: title, type: string}
  expose: [{type: rest, actions: [list, find, update]}]
""",
    "depot/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: depot}
spec:
  lifecycle: true
  fields:
    - {name: code, type: string, natural_key: true, required: true}
    - {name: title, type: string}
  expose: [{type: rest}]
""",
    "depot/slip.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: slip, module: depot}
spec:
  lifecycle: true
  fields:
    - {name: code, type: string, natural_key: true, required: true}
    - {name: title, type: string}
  expose: [{type: rest, actions: [list, find, create]}]
""",
    "depot/sample.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: sample, module: depot}
spec:
  lifecycle: true
  fields:
    - {name: ref, type: string, natural_key: true, required: true}
    - {name: label, type: string}
    - {name: note, type: text}
    - {name: count, type: integer}
    - {name: price, type: decimal, precision: 12, scale: 2}
    - {name: ratio, type: number}
    - {name: active, type: boolean}
    - {name: due, type: date}
    - {name: at, type: datetime}
    - {name: colour, type: enum, enum_values: [red, green]}
    - {name: tags, type: string, multiple: true}
    - {name: extra, type: json}
    - {name: batch, type: string, immutable: true}
  expose: [{type: rest}]
""",
}
D = "/default/api/depot"
CATALOG = load(SPEC)
VECTORS = json.loads((Path(__file__).parents[2] / "ui" / "test" / "csv-vectors.json").read_text())


def bearer(roles: list[str], **attrs: Any) -> dict[str, str]:
    claims: dict[str, Any] = {"roles": roles}
    if attrs:
        claims["attrs"] = attrs
    return {"Authorization": f"Bearer {token(**claims)}"}


ADMIN = bearer(["admin"])
FORBIDDEN = "SVC.AUTH.FORBIDDEN"
CLERK = bearer(["clerk"], regions=["north"])
KEEPER = bearer(["keeper"], regions=["north"])
READER = bearer(["reader"], regions=["north"])
ADDER = bearer(["adder"], regions=["north"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, CATALOG) as r:
        await r.register("default")
        yield r


async def send(
    srv: Running, method: str, path: str, headers: dict[str, str], data: bytes | None = None
) -> tuple[int, Any, Any]:
    async with srv.http.request(method, srv.api + path, data=data, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status < 500, raw
        body = json.loads(raw) if resp.content_type.endswith("json") and raw else raw
        if resp.status >= 400:
            assert resp.content_type == "application/problem+json", raw
            assert body["status"] == resp.status and body["code"].startswith("SVC."), body
        return resp.status, body, resp.headers


async def rest(srv: Running, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    status, answer, _ = await send(
        srv, method, path, {**headers, "Content-Type": "application/json"}, json.dumps(body).encode()
    )
    return status, answer


async def import_csv(
    srv: Running, entity: str, text: str | bytes, headers: dict[str, str], *, dry: bool = False
) -> tuple[int, Any]:
    data = text.encode() if isinstance(text, str) else text
    query = "?dry_run=true" if dry else ""
    status, answer, _ = await send(
        srv, "POST", f"{D}/{entity}/_import{query}", {**headers, "Content-Type": "text/csv"}, data
    )
    return status, answer


async def seeded(pg_dsn: str, entity: str, values: dict[str, Any]) -> dict[str, Any]:
    """A record made by the seed loader (``dap seed``), for an entity whose REST has no create."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        found = await workspaces.find(conn, "default")
        assert found is not None
        row = seeds.Row("test", 1, f"depot/{entity}", values)
        await seeding.load(conn, CATALOG, found.tenant_id, [row])
        table = tables.quote(CATALOG.resources[f"depot/{entity}"].table.name)
        record = await conn.fetchrow(f"SELECT id::text AS id FROM {table} WHERE code = $1", values["code"])
        assert record is not None
        return {"id": record["id"], "version": 1}
    finally:
        await conn.close()


async def create(srv: Running, entity: str, body: dict[str, Any], *, submit: bool = False) -> dict[str, Any]:
    status, answer = await rest(
        srv, "POST", f"{D}/{entity}" + ("?submit=true" if submit else ""), ADMIN, body
    )
    assert status == 201, answer
    return answer["data"]  # type: ignore[no-any-return]


async def stored(pg_dsn: str) -> list[tuple[str, int]]:
    """Every record of the spec's tables with its version: what a refused import must not change."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        out: list[tuple[str, int]] = []
        for table in (
            "depot__item",
            "depot__ledger",
            "depot__fixed",
            "depot__order",
            "depot__slip",
            "depot__sample",
        ):
            rows = await conn.fetch(f'SELECT id::text AS id, version FROM "{table}" ORDER BY id')
            out += [(r["id"], r["version"]) for r in rows]
        return out
    finally:
        await conn.close()


def csv_line(cells: list[str]) -> str:
    return ",".join(f'"{c}"' if "," in c else c for c in cells)


_SERIAL = iter(range(1, 1_000_000))


@dataclass(frozen=True)
class Case:
    entity: str
    headers: dict[str, str]
    change: dict[str, str]  # the row's cells (besides the key); the REST body sends them as JSON
    status: int  # what the REST verb answers
    code: str | None = None
    existing: dict[str, str] | None = None  # the record the row updates (None: the row creates)
    by_id: bool = False  # the row names its record by ``id`` (an export's), not its natural key
    submitted: bool = False
    if_match: int | None = None  # the version the row (``version`` column) and PATCH (If-Match) name
    typed: dict[str, Any] = field(default_factory=dict)  # JSON values where a cell is not a string
    submit: bool = False  # the row creates and submits: ``?submit=true``, ``_submit``


def c(*args: Any, **kw: Any) -> Case:
    return Case(*args, **kw)


NORTH = {"region": "north"}
CASES = [
    pytest.param(c("item", CLERK, {"title": "t", **NORTH}, 201), id="create"),
    pytest.param(
        c("item", READER, {"title": "t", **NORTH}, 403, "SVC.AUTH.FORBIDDEN"), id="create-no-permission"
    ),
    pytest.param(
        c("item", CLERK, {"title": "t", "secret": "s", **NORTH}, 403, "SVC.AUTH.FORBIDDEN"),
        id="create-guarded-field",
    ),
    pytest.param(
        c("item", KEEPER, {"title": "t", "secret": "s", **NORTH}, 201), id="create-guarded-field-held"
    ),
    pytest.param(
        c("item", CLERK, {"title": "t", "region": "south"}, 403, "SVC.AUTH.ROW_SCOPE"), id="create-row-scope"
    ),
    pytest.param(
        c("item", CLERK, {"title": "t", "qty": "many", **NORTH}, 422, "SVC.VALIDATE.INVALID"),
        id="create-invalid",
    ),
    pytest.param(
        c("item", CLERK, {"title": "t", "qty": "17", **NORTH}, 201, typed={"qty": 17}), id="create-integer"
    ),
    pytest.param(  # as a JSON body takes 17.0 (refused once: "expected an integer")
        c("item", CLERK, {"title": "t", "qty": "17.0", **NORTH}, 201, typed={"qty": 17}),
        id="create-integer-written-17.0",
    ),
    pytest.param(
        c("item", CLERK, {"title": "t", "qty": "17.5", **NORTH}, 422, "SVC.VALIDATE.INVALID"),
        id="create-integer-with-a-fraction",
    ),
    pytest.param(c("ledger", ADMIN, {"title": "t"}, 201), id="create-exposed"),
    pytest.param(c("order", ADMIN, {"title": "t"}, 201, submit=True), id="create-and-submit"),
    pytest.param(
        c("slip", ADMIN, {"title": "t"}, 409, "SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE", submit=True),
        id="create-and-submit-update-not-exposed",
    ),
    pytest.param(c("fixed", ADMIN, {"title": "t"}, 405, "SVC.ACTION.NOT_EXPOSED"), id="create-not-exposed"),
    pytest.param(c("item", CLERK, {"title": "new"}, 200, existing=NORTH), id="update"),
    pytest.param(c("item", CLERK, {"title": "new"}, 200, existing=NORTH, by_id=True), id="update-by-id"),
    pytest.param(
        c("item", READER, {"title": "new"}, 403, "SVC.AUTH.FORBIDDEN", existing=NORTH),
        id="update-no-permission",
    ),
    pytest.param(
        c("item", ADDER, {"title": "new"}, 403, "SVC.AUTH.FORBIDDEN", existing=NORTH),
        id="update-create-permission-only",
    ),
    pytest.param(
        c(
            "item",
            CLERK,
            {"secret": "guess"},
            403,
            "SVC.AUTH.FORBIDDEN",
            existing={**NORTH, "secret": "guess"},
        ),
        id="update-guarded-field-right-guess",
    ),
    pytest.param(
        c(
            "item",
            CLERK,
            {"secret": "wrong"},
            403,
            "SVC.AUTH.FORBIDDEN",
            existing={**NORTH, "secret": "guess"},
        ),
        id="update-guarded-field-wrong-guess",
    ),
    pytest.param(
        c("item", KEEPER, {"secret": "other"}, 200, existing={**NORTH, "secret": "guess"}),
        id="update-guarded-field-held",
    ),
    pytest.param(
        c("item", CLERK, {"title": "new"}, 403, "SVC.AUTH.ROW_SCOPE", existing={"region": "south"}),
        id="update-row-scope",
    ),
    pytest.param(
        c(
            "item",
            CLERK,
            {"title": "new"},
            403,
            "SVC.AUTH.ROW_SCOPE",
            existing={"region": "south"},
            by_id=True,
        ),
        id="update-row-scope-by-id",
    ),
    pytest.param(
        c(
            "item",
            ADMIN,
            {"title": "new"},
            412,
            "SVC.VERSION.MISMATCH",
            existing=NORTH,
            by_id=True,
            if_match=7,
        ),
        id="update-stale-version",
    ),
    pytest.param(
        c("item", ADMIN, {"title": "new"}, 200, existing=NORTH, by_id=True, if_match=1),
        id="update-current-version",
    ),
    pytest.param(
        c("ledger", ADMIN, {"title": "new"}, 405, "SVC.ACTION.NOT_EXPOSED", existing={}),
        id="update-not-exposed",
    ),
    pytest.param(c("fixed", ADMIN, {"title": "new"}, 200, existing={}), id="update-exposed"),
    pytest.param(
        c("order", ADMIN, {"title": "new"}, 409, "SVC.DOC.UPDATE_NOT_DRAFT", existing={}, submitted=True),
        id="update-submitted-document",
    ),
]


def _code(answer: Any, status: int) -> str | None:
    return answer.get("code") if status >= 400 else None


@pytest.mark.parametrize("case", CASES)
async def test_an_import_row_obeys_the_rules_of_the_verb_it_stands_for(
    srv: Running, pg_dsn: str, case: Case
) -> None:
    body = {k: case.typed.get(k, v) for k, v in case.change.items()}
    answers = []
    for how in ("rest", "import"):
        key = f"{case.entity[:2].upper()}-{next(_SERIAL)}"
        record = None
        if case.existing is not None:
            values = {"code": key, **case.existing}
            if case.entity == "fixed":
                record = await seeded(pg_dsn, case.entity, values)
            else:
                record = await create(srv, case.entity, values, submit=case.submitted)
        before = await stored(pg_dsn)
        if how == "rest" and record is None:
            query = "?submit=true" if case.submit else ""
            status, answer = await rest(
                srv, "POST", f"{D}/{case.entity}{query}", case.headers, {"code": key, **body}
            )
            answers.append((status, _code(answer, status)))
        elif how == "rest":
            assert record is not None
            headers = dict(case.headers)
            if case.if_match is not None:
                headers["If-Match"] = f'"{case.if_match}"'
            status, answer = await rest(srv, "PATCH", f"{D}/{case.entity}/{record['id']}", headers, body)
            answers.append((status, _code(answer, status)))
        else:
            names = ["id" if case.by_id else "code", *case.change]
            cells = [record["id"] if case.by_id and record else key, *case.change.values()]
            if case.if_match is not None:
                names, cells = [*names, "version"], [*cells, str(case.if_match)]
            if case.submit:
                names, cells = [*names, "_submit"], [*cells, "true"]
            text = f"{csv_line(names)}\n{csv_line(cells)}\n"
            status, answer = await import_csv(srv, case.entity, text, case.headers)
            if status == 200:
                counted = (answer["created"], answer["updated"], answer["unchanged"])
                assert counted == ((1, 0, 0) if record is None else (0, 1, 0)), answer  # each row once
                answers.append((201 if record is None else 200, None))
            else:  # the verb's code: the answer's own (405, 403), else its problem's in a 422
                problem = answer["problems"][0]
                assert problem["line"] == 2, answer
                if status not in (403, 405):
                    assert answer["code"] == "SVC.IMPORT.ROWS", answer
                answers.append((status, answer["code"] if status in (403, 405) else problem["code"]))
        if answers[-1][0] >= 400:
            assert await stored(pg_dsn) == before, (how, answers[-1])  # a refusal writes nothing
    assert answers[0] == (case.status, case.code), answers
    refusal_status = case.status if case.status < 400 or case.status in (403, 405) else 422
    assert answers[1] == (refusal_status, case.code), answers


async def test_a_guarded_field_is_no_oracle_for_its_stored_value(srv: Running) -> None:
    """A caller who may not read ``secret`` learns nothing of it from a dry run: a right guess and
    a wrong one meet the same refusal (the row that last wrote the record is not compared first)."""
    status, _ = await import_csv(srv, "item", "code,region,secret\nORACLE-1,north,hunter2\n", ADMIN)
    assert status == 200
    answers = []
    for guess in ("hunter2", "wrong"):
        status, answer = await import_csv(
            srv, "item", f"code,region,secret\nORACLE-1,north,{guess}\n", CLERK, dry=True
        )
        answers.append((status, answer["code"], answer["problems"]))
    assert answers[0] == answers[1], answers
    assert answers[0][:2] == (403, "SVC.AUTH.FORBIDDEN"), answers


async def test_a_caller_without_create_permission_learns_it_is_a_permission_problem(srv: Running) -> None:
    status, answer = await import_csv(srv, "item", "code,region\nNOPE-1,north\nNOPE-2,north\n", READER)
    assert (status, answer["code"]) == (403, "SVC.AUTH.FORBIDDEN"), answer
    assert [(p["line"], p["code"]) for p in answer["problems"]] == [(2, FORBIDDEN), (3, FORBIDDEN)]
    assert "depot.item.create" in answer["problems"][0]["message"]


async def test_each_row_is_counted_once_in_the_preview_and_the_import(srv: Running) -> None:
    await create(srv, "item", {"code": "COUNT-1", "region": "north", "title": "old"})
    text = "code,region,title\nCOUNT-1,north,new\nCOUNT-2,north,made\nCOUNT-3,north,made\n"
    for dry in (True, False):
        status, answer = await import_csv(srv, "item", text, ADMIN, dry=dry)
        assert status == 200, answer
        assert (answer["rows"], answer["created"], answer["updated"], answer["unchanged"]) == (3, 2, 1, 0)
    status, again = await import_csv(srv, "item", text, ADMIN)
    assert (again["created"], again["updated"], again["unchanged"]) == (0, 0, 3), again


MALFORMED = [
    pytest.param('code,title\nBAD-1,"never closed\nBAD-2,x\n', 2, "title", "never closed", id="open-quote"),
    pytest.param('code,title\nBAD-1,"a"b\n', 2, "title", "after a closing quote", id="text-after-quote"),
    pytest.param("code,title,title\nBAD-1,a,b\n", 1, "title", "more than once", id="repeated-column"),
    pytest.param("code,title,_submit\nBAD-1,a,ture\n", 2, "_submit", "true or false", id="submit-ture"),
    pytest.param("code,title\nNUL\x00KEY,a\n", 2, "code", "NUL", id="nul-in-cell"),
    pytest.param("code,title,_key\nBAD-1,a,k\x00\n", 2, "_key", "NUL", id="nul-in-key"),
    pytest.param("code,title\nBAD-1," + "x" * 200_000 + "\n", 2, "title", "at most", id="long-cell"),
    pytest.param("code,title\nBAD-1,a,b\n", 2, None, "3 cells for 2 columns", id="extra-cell"),
    pytest.param(b"code,title\nBAD-1,caf\xe9\n", 2, None, "not UTF-8", id="latin-1"),
]


@pytest.mark.parametrize(("text", "line", "column", "says"), MALFORMED)
async def test_a_malformed_file_names_line_and_column_and_imports_nothing(
    srv: Running, pg_dsn: str, text: str | bytes, line: int, column: str | None, says: str
) -> None:
    before = await stored(pg_dsn)
    status, answer = await import_csv(srv, "order", text, ADMIN)
    assert (status, answer["code"]) == (422, "SVC.IMPORT.ROWS"), answer
    problem = answer["problems"][0]
    assert (problem["line"], problem["field"]) == (line, column), answer
    assert says in problem["message"], answer
    assert await stored(pg_dsn) == before


def _export(columns: list[str], rows: list[dict[str, Any]], json_columns: set[str]) -> str:
    """What the UI's ``toCsv`` writes (the vectors pin the two writers to the same cells)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        cells = []
        for name in columns:
            value = row.get(name)
            if value is None:
                cells.append("")
                continue
            if name in json_columns or isinstance(value, dict | list):
                text = json.dumps(value, separators=(",", ":"))
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            cells.append(csvdialect.guarded(text))
        writer.writerow(cells)
    return buffer.getvalue()


async def test_the_shared_vectors_import_back_as_the_values_they_were(srv: Running) -> None:
    """The cell the UI writes for each value (``ui/test/csv-vectors.json``) is read back by the
    import as that value: typed by the field (integers, numbers, booleans, dates, JSON) and with
    the formula guard undone."""
    vectors = VECTORS["vectors"]
    names = sorted({v["field"] for v in vectors})
    lines = [",".join(["ref", *names])]
    for i, v in enumerate(vectors):
        lines.append(",".join([f"V-{i}", *(v["cell"] if n == v["field"] else "" for n in names)]))
    status, answer = await import_csv(srv, "sample", "\r\n".join(lines) + "\r\n", ADMIN)
    assert status == 200 and answer["created"] == len(vectors), answer
    status, listed, _ = await send(srv, "GET", f"{D}/sample?ref[like]=V-%25&limit=1000", ADMIN)
    by_ref = {r["ref"]: r for r in listed["data"]}
    got = [by_ref[f"V-{i}"][v["field"]] for i, v in enumerate(vectors)]
    assert got == [v["value"] for v in vectors]
    for i, v in enumerate(vectors):  # what Python's side of the dialect writes is the UI's cell
        text = json.dumps(v["value"], separators=(",", ":")) if v["json"] else _text(v["value"])
        assert csvdialect.read(f"x\r\n{_quoted(csvdialect.guarded(text))}\r\n").records[0][1] == [
            csvdialect.guarded(text)
        ], i


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


async def test_a_lists_export_imports_back_by_id_unchanged_then_edited(srv: Running) -> None:
    made = [
        await create(
            srv, "sample", {"ref": "EXP-1", "label": "=cmd|' /C calc'!A0", "count": 17, "batch": "B-1"}
        ),
        await create(srv, "sample", {"ref": "EXP-2", "label": "-1+1", "tags": ["x"], "extra": {"a": 1}}),
        await create(srv, "sample", {"ref": "EXP-3", "active": True, "due": "2024-01-31"}, submit=True),
    ]
    status, listed, _ = await send(srv, "GET", f"{D}/sample?ref[like]=EXP-%25&sort=ref", ADMIN)
    fields = [*(f.name for f in CATALOG.resources["depot/sample"].fields.values())]
    columns = ["id", *fields, "docstatus", "version"]
    text = _export(columns, listed["data"], {"tags", "extra"})
    assert "'=cmd" in text and "'-1+1" in text  # the formula guard, as the UI writes it
    status, answer = await import_csv(srv, "sample", text, ADMIN)
    assert status == 200 and (answer["created"], answer["updated"], answer["unchanged"]) == (0, 0, 3), answer
    rows = [dict(r) for r in listed["data"]]
    rows[0]["count"] = 18
    status, answer = await import_csv(srv, "sample", _export(columns, rows, {"tags", "extra"}), ADMIN)
    assert status == 200 and (answer["updated"], answer["unchanged"]) == (1, 2), answer
    status, got, _ = await send(srv, "GET", f"{D}/sample/{made[0]['id']}", ADMIN)
    assert (got["data"]["count"], got["data"]["label"], got["data"]["version"]) == (
        18,
        "=cmd|' /C calc'!A0",
        2,
    )
    # an immutable field the export lists imports back at its value, and is refused changed
    rows[0]["batch"], rows[0]["version"] = "B-2", 2
    status, answer = await import_csv(srv, "sample", _export(columns, rows, {"tags", "extra"}), ADMIN)
    assert status == 422 and answer["problems"][0]["field"] == "batch", answer
    rows[0]["batch"], rows[0]["version"] = "B-1", 1
    # the same file again: the first row was written at version 1, the record is at 2 now
    status, answer = await import_csv(srv, "sample", _export(columns, rows, {"tags", "extra"}), ADMIN)
    assert status == 422 and answer["problems"][0]["code"] == "SVC.VERSION.MISMATCH", answer
    assert answer["problems"][0]["line"] == 2


# --- fuzz --------------------------------------------------------------------------------------

PIECES = [
    "code",
    "title",
    "region",
    "qty",
    "secret",
    "_key",
    "_submit",
    "_actions",
    "_votes",
    "id",
    "version",
    "docstatus",
    "owner",
    '"',
    '""',
    ",",
    "\r\n",
    "\n",
    "\r",
    "\x00",
    "=1+2",
    "'",
    "17",
    "-5",
    "ture",
    "true",
    "north",
    "\ufeff",
    "é",
    "\ud7ff",
    " ",
    "x" * 300,
    "FZ-1",
    "6f1c3a9e-7b7d-4d7a-9a55-1b2c3d4e5f60",
]


def _fuzzed(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    header = rng.sample(["code", "title", "region", "qty", "_submit", "id", "version"], rng.randint(1, 5))
    if rng.random() < 0.5:
        header = ["code", "region", *(h for h in header if h not in ("code", "region"))]
    lines = [",".join(header)]
    for _ in range(rng.randint(0, 4)):
        cells = [
            f"FZ-{rng.randint(0, 30)}" if h == "code" else "north" if h == "region" else "" for h in header
        ]
        for i in range(len(cells)):
            if rng.random() < 0.4:
                cells[i] = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
        lines.append(",".join(cells))
    text = rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n", '"'])
    encoding = rng.choice(["utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"])
    return text.encode(encoding, errors="replace")


async def test_fuzzed_files_answer_2xx_or_a_problem_and_write_nothing_on_4xx(
    srv: Running, pg_dsn: str
) -> None:
    rng = random.Random(20261128)
    statuses: list[int] = []
    for _ in range(120):
        data = _fuzzed(rng)
        before = await stored(pg_dsn)
        status, answer = await import_csv(srv, "item", data, rng.choice([ADMIN, CLERK, READER]))
        statuses.append(status)
        if status >= 400:  # ``send`` checked it is a problem document
            assert await stored(pg_dsn) == before, (data, answer)
    assert any(s == 200 for s in statuses) and any(400 <= s < 500 for s in statuses)


async def test_a_csv_seed_file_types_its_cells_as_the_import_does(srv: Running, pg_dsn: str) -> None:
    text = "code,region,qty\nSEED-1,north,17\nSEED-2,north,-3\nSEED-3,north,2.0\n"  # 2.0: as JSON's
    conn = await asyncpg.connect(pg_dsn)
    try:
        found = await workspaces.find(conn, "default")
        assert found is not None
        report = await seeding.load(
            conn, CATALOG, found.tenant_id, seeds.parse_files([("depot.item.csv", text)])
        )
    finally:
        await conn.close()
    assert report.created == 3
    _, listed, _ = await send(srv, "GET", f"{D}/item?code[like]=SEED-%25&sort=code", ADMIN)
    assert [r["qty"] for r in listed["data"]] == [17, -3, 2]


async def test_a_file_past_the_limit_is_refused_with_or_without_its_length(srv: Running, pg_dsn: str) -> None:
    before = await stored(pg_dsn)
    big = b"code,title\n" + b"BIG-1," + b"x" * imports.MAX_BYTES + b"\n"
    status, answer = await import_csv(srv, "item", big, ADMIN)
    assert (status, answer["code"]) == (413, "SVC.IMPORT.TOO_LARGE"), answer

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused while reading
        for start in range(0, len(big), 1 << 16):
            yield big[start : start + (1 << 16)]

    headers = {**ADMIN, "Content-Type": "text/csv"}
    async with srv.http.post(srv.api + f"{D}/item/_import", data=chunks(), headers=headers) as resp:
        problem = await resp.json(content_type=None)
        assert (resp.status, problem["code"]) == (413, "SVC.IMPORT.TOO_LARGE"), problem
    assert await stored(pg_dsn) == before
    # past the server's body limit for JSON (1 MiB) and within the import's: a long text cell
    note = "n" * (2 * 1024 * 1024)
    status, answer = await import_csv(srv, "sample", f"ref,note\nBIG-NOTE,{note}\n", ADMIN, dry=True)
    assert (status, answer["created"]) == (200, 1), answer
