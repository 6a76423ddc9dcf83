"""CSV import into one entity: ``POST /{ws}/api/{module}/{entity}/_import`` (``text/csv``).

The file is read in dap's one CSV dialect (``workflows.csvdialect``: RFC 4180, strict, the
formula guard of the UI's export undone) and its rows go through the seed loader
(``workflows.seeding.load``), the path ``dap seed`` takes, with the caller as the writer: each
row stands for the verb it would be over REST -- a create, or an update where its ``id``, its
natural key or ``_key`` names a record already there -- and obeys that verb's ``expose``, the
caller's permissions, field guards, row scope, validation and lifecycle rules, in one
transaction. Cells are converted by their field's type (``fieldvalues.from_cell``), so a list's own
export imports back: its ``id`` names the record, its ``version`` and ``docstatus`` must still be
the record's (else the row is stale).

Any problem rolls the whole file back and the answer lists each one with its line, column and
code (``problems``); nothing is half-imported. The answer's status is the one the rows' verbs
would have met: 405 ``SVC.ACTION.NOT_EXPOSED`` when a row stands for a verb ``expose`` does not
open, else 403 (``SVC.AUTH.*``) when a row was refused for a permission, else 422
``SVC.IMPORT.ROWS`` (a malformed file, a value that does not fit). ``?dry_run=true`` runs the
same load and always rolls back: the preview of what an import would do (its counts and
problems) without doing it.

The header names fields and, of the export's system columns, ``id``, ``version`` and
``docstatus``; of the loader's own columns only ``_key`` (the row's key where the entity has no
natural key), ``_submit`` and ``_actions`` (run as the caller) are accepted: ``_votes`` would vote
as other people, and seed accounts are not the importer's to make.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import csvdialect, seeding, seeds

PATH = "/{ws}/api/{module}/{entity}/_import"
LOADER_COLUMNS = frozenset({"_key", "_submit", "_actions"})
MAX_BYTES = 5 * 1024 * 1024
SOURCE = "import.csv"
ROWS = "SVC.IMPORT.ROWS"


def _problem(p: seeds.Problem) -> dict[str, Any]:
    return {"line": p.line, "field": p.field, "message": p.message, "code": p.code or ROWS}


def _too_large() -> errors.PayloadTooLarge:
    return errors.PayloadTooLarge(
        f"an import takes at most {MAX_BYTES} bytes; split the file", code="SVC.IMPORT.TOO_LARGE"
    )


async def _body(request: web.Request) -> bytes:
    """The file, up to :data:`MAX_BYTES` (above the server's body limit for JSON, which
    ``request.read`` would apply): a 413 as soon as it is past, with or without a length."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _text(raw: bytes) -> str:
    """The body as UTF-8 text (a byte-order mark dropped); a problem naming the line otherwise."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        why = f"byte {exc.start + 1} is not UTF-8: save the file as UTF-8 (CSV UTF-8) and import it again"
        raise seeds.SeedFileError([seeds.Problem(SOURCE, line, None, why)]) from exc


async def handler(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    entity = f"{request.match_info['module']}/{request.match_info['entity']}"
    # what REST exposes, as every other route of the entity: each row is refused the verbs
    # ``expose`` does not open (``seeding``), and an entity that opens neither takes no import
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None:
        raise errors.NotFound(f"no entity {entity} is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    if "create" not in resource.actions and "update" not in resource.actions:
        raise errors.NotFound(f"{entity} exposes neither create nor update", code="SVC.ACTION.NOT_EXPOSED")
    if request.content_length is not None and request.content_length > MAX_BYTES:
        raise _too_large()
    dry_run = request.query.get("dry_run") == "true"
    try:
        table = csvdialect.read(_text(await _body(request)))
    except seeds.SeedFileError as exc:
        return _refused(exc.problems, dry_run)
    except csvdialect.CsvError as exc:
        return _refused([seeds.Problem(SOURCE, exc.line, exc.column_name, exc.message)], dry_run)
    header = table.header
    unknown = [c for c in header if c.startswith("_") and c not in LOADER_COLUMNS]
    unknown += [
        c
        for c in header
        if not c.startswith("_") and c not in resource.fields and c not in seeds.EXPORT_COLUMNS
    ]
    if not header or unknown:
        raise errors.ValidationFailed(
            f"columns that are not fields of {entity}: {', '.join(unknown) or '(no header)'}",
            code="SVC.IMPORT.COLUMNS",
            errors=[errors.FieldProblem(c, "not a field of this entity") for c in unknown],
        )
    try:
        rows = seeds.parse_table(SOURCE, table, entity)
    except seeds.SeedFileError as exc:
        return _refused(exc.problems, dry_run)
    async with db.connection(request.app[state.POOL]) as conn:
        outer = conn.transaction()
        await outer.start()
        try:
            report = await seeding.load(
                conn, catalog, workspace.tenant_id, rows, principal=principal, verbs=resource.actions
            )
        except seeding.SeedError as exc:
            await outer.rollback()
            return _refused(exc.problems, dry_run)
        except BaseException:
            await outer.rollback()
            raise
        if dry_run:
            await outer.rollback()
        else:
            await outer.commit()
    return web.json_response(
        {
            "dry_run": dry_run,
            "rows": len(rows),
            "created": report.created,
            "updated": report.updated,  # an adopted record is one of them, counted once
            "unchanged": report.unchanged,
            "notes": report.notes,
            "problems": [],
        }
    )


def _answer(problems: list[seeds.Problem]) -> errors.ApiError:
    """The error the rows' verbs would have met: 405, else 403, else 422 (see the module's text)."""
    detail = f"{len(problems)} problem(s); nothing was imported"
    refused = next((p for status in (405, 403) for p in problems if p.status == status), None)
    error: errors.ApiError
    if refused is not None and refused.status == 405:
        error = errors.MethodNotAllowed(detail, allow=["POST"], code=refused.code)
    elif refused is not None:
        error = errors.Forbidden(detail, code=refused.code)
    else:
        error = errors.ValidationFailed(detail, code=ROWS)
    error.errors = tuple(
        errors.FieldProblem(f"line {p.line}" + (f": {p.field}" if p.field else ""), p.message)
        for p in problems
    )
    return error


def _refused(problems: list[seeds.Problem], dry_run: bool) -> web.Response:
    error = _answer(problems)
    body = error.problem() | {"dry_run": dry_run, "problems": [_problem(p) for p in problems]}
    return web.json_response(
        body, status=error.status, content_type=errors.PROBLEM_CONTENT_TYPE, headers=error.headers
    )


def add_routes(app: web.Application) -> None:
    """Before the REST item routes: ``…/{entity}/_import`` is not a record id."""
    app.router.add_post(PATH, handler)
