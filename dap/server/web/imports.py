"""CSV import into one entity: ``POST /{ws}/api/{module}/{entity}/_import`` (``text/csv``).

The rows go through the seed loader (``workflows.seeding.load``), the path ``dap seed`` takes,
with the caller as the writer: every row is a create (or, where its natural key or ``_key``
names a record already there, an update) under the caller's own permissions, field guards, row
scope, validation and lifecycle rules, in one transaction. Any problem rolls the whole file back
and the answer lists each one with its line and field (422, ``SVC.IMPORT.ROWS``): nothing is
half-imported. ``?dry_run=true`` runs the same load and always rolls back: the preview of what an
import would do (its counts and problems) without doing it.

The header names fields; of the loader's own columns only ``_key`` (the row's key where the
entity has no natural key), ``_submit`` and ``_actions`` (run as the caller) are accepted:
``_votes`` would vote as other people, and seed accounts are not the importer's to make.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.storage import db
from dap.server.web import requests
from dap.server.workflows import seeding, seeds

PATH = "/{ws}/api/{module}/{entity}/_import"
LOADER_COLUMNS = frozenset({"_key", "_submit", "_actions"})
MAX_BYTES = 5 * 1024 * 1024


def _header(text: str) -> list[str]:
    return next(csv.reader(io.StringIO(text)), [])


def _problem(p: seeds.Problem) -> dict[str, Any]:
    return {"line": p.line, "field": p.field, "message": p.message}


async def handler(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    entity = f"{request.match_info['module']}/{request.match_info['entity']}"
    # what REST exposes, as every other route of the entity: an import writes through its
    # create (and update, for rows naming a record already there)
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None:
        raise errors.NotFound(f"no entity {entity} is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    if "create" not in resource.actions and "update" not in resource.actions:
        raise errors.NotFound(f"{entity} exposes neither create nor update", code="SVC.ACTION.NOT_EXPOSED")
    if request.content_length is not None and request.content_length > MAX_BYTES:
        raise errors.PayloadTooLarge(
            f"an import takes at most {MAX_BYTES} bytes", code="SVC.IMPORT.TOO_LARGE"
        )
    text = (await request.read()).decode("utf-8-sig", errors="replace")
    header = _header(text)
    unknown = [c for c in header if c.startswith("_") and c not in LOADER_COLUMNS]
    unknown += [c for c in header if not c.startswith("_") and c not in resource.fields]
    if not header or unknown:
        raise errors.ValidationFailed(
            f"columns that are not fields of {entity}: {', '.join(unknown) or '(no header)'}",
            code="SVC.IMPORT.COLUMNS",
            errors=[errors.FieldProblem(c, "not a field of this entity") for c in unknown],
        )
    dry_run = request.query.get("dry_run") == "true"
    try:
        rows = seeds.parse_csv("import.csv", text, entity)
    except seeds.SeedFileError as exc:
        return _refused(exc.problems, dry_run)
    async with db.connection(request.app[state.POOL]) as conn:
        outer = conn.transaction()
        await outer.start()
        try:
            report = await seeding.load(conn, catalog, workspace.tenant_id, rows, principal=principal)
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
            "updated": report.updated + report.adopted,
            "unchanged": report.unchanged,
            "notes": report.notes,
            "problems": [],
        }
    )


def _refused(problems: list[seeds.Problem], dry_run: bool) -> web.Response:
    body = {
        "type": "about:blank",
        "title": "Unprocessable import",
        "status": 422,
        "code": "SVC.IMPORT.ROWS",
        "detail": f"{len(problems)} problem(s); nothing was imported",
        "dry_run": dry_run,
        "problems": [_problem(p) for p in problems],
    }
    return web.json_response(body, status=422, content_type="application/problem+json")


def add_routes(app: web.Application) -> None:
    """Before the REST item routes: ``…/{entity}/_import`` is not a record id."""
    app.router.add_post(PATH, handler)
