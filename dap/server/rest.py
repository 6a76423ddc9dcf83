"""REST handlers of the generated entity API (list, find, create, update, delete).

Paths and bodies are those of ARCHITECTURE.md. A handler resolves the workspace (404 when it is
not registered), verifies the bearer token for that workspace (401), reads the catalog reference
once, checks that the entity opted into the action through ``expose`` (404 when the entity is not
exposed, 405 when the action is not), and then runs parameterised SQL that always carries the
workspace's ``tenant_id``. Uniqueness comes from the database's unique index (a
``UniqueViolationError`` names the constraint, which maps back to the field), never from a racy
pre-check.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import asyncpg
from aiohttp import web

from dap.server import (
    auditing,
    auth,
    caching,
    db,
    documents,
    errors,
    filling,
    guards,
    records,
    scoping,
    sql,
    state,
    tables,
    writing,
)
from dap.server.catalog import Catalog, Resource
from dap.server.workspaces import Workspace

log = logging.getLogger(__name__)


async def resolve(
    request: web.Request, *, action: str | None = None
) -> tuple[Workspace, auth.Principal, Catalog]:
    """Workspace, caller and catalog of a REST request, in that order of checks.

    Without an Authorization header, ``action`` list or find of an entity declaring
    ``auth: {required: false}`` gets the anonymous caller (guards); everything else needs a token.
    """
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    catalog = request.app[state.SPEC].current
    header = request.headers.get("Authorization")
    if header is None and guards.open_to_anonymous(catalog, request.match_info, action):
        return workspace, guards.anonymous(workspace.slug), catalog
    principal = request.app[state.VERIFIER].verify(auth.bearer_token(header), workspace=workspace.slug)
    if principal.workspace is None:  # row scope and session values see the URL's workspace
        principal = dataclasses.replace(principal, workspace=workspace.slug)
    return workspace, principal, catalog


def _resource(
    catalog: Catalog, request: web.Request, action: str, *, siblings: Sequence[tuple[str, str]]
) -> Resource:
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None:
        raise errors.NotFound(
            f"no entity {request.match_info['module']}/{request.match_info['entity']} is exposed over REST",
            code="SVC.ENTITY.NOT_FOUND",
        )
    if action not in resource.actions:
        allowed = [method for name, method in siblings if name in resource.actions]
        if not allowed:
            raise errors.NotFound(f"{resource.key} does not expose {action}", code="SVC.ACTION.NOT_EXPOSED")
        raise errors.MethodNotAllowed(
            f"{resource.key} does not expose {action}",
            code="SVC.ACTION.NOT_EXPOSED",
            headers={"Allow": ", ".join(allowed)},
        )
    return resource


_COLLECTION = (("list", "GET"), ("create", "POST"))
_ITEM = (("find", "GET"), ("update", "PATCH"), ("delete", "DELETE"))


def parse_record_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        # a malformed id cannot name a record: 404, as for any id that does not exist
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND") from exc


async def select_record(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    *,
    principal: auth.Principal,
    lock: bool = False,
) -> asyncpg.Record:
    """The one lookup of a record by id — find, update, delete, submit/cancel, the audit trail — or 404.

    ``lock`` reads it ``FOR UPDATE``, for a write in the caller's transaction. Rules on which rows a
    caller may name (row scope) belong here, so that every path by id applies them alike.
    """
    scope = guards.scope_of(resource, principal)
    statement, args = sql.select_one(resource.table, tenant, record_id, scope=scoping.conditions(scope))
    row = await conn.fetchrow(f"{statement} FOR UPDATE" if lock else statement, *args)
    if row is None:
        raise await guards.missing(conn, resource, tenant, record_id, scope)
    return row


def dumps(data: Any) -> str:
    return json.dumps(data, default=db.json_default, separators=(",", ":"))


def reply(data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        text=dumps(data), status=status, content_type="application/json", headers=dict(headers or {})
    )


def present(
    resource: Resource,
    row: Mapping[str, Any] | asyncpg.Record,
    children: Mapping[str, list[dict[str, Any]]] | None = None,
    *,
    surface: str = "rest",
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The JSON of one stored row: REST-visible fields plus the system fields."""
    out: dict[str, Any] = {}
    for slot in resource.slots:
        if (only is not None and slot.name not in only) or surface in slot.exclude:
            continue
        if slot.column is None:
            out[slot.name] = (children or {}).get(slot.name, [])
            continue
        value = row[slot.column]
        out[slot.name] = value if slot.convert is None or value is None else slot.convert(value)
    out["id"] = str(row["id"])  # always, even with ``fields=``
    if only is None or "version" in only:
        out["version"] = row["version"]
    if resource.lifecycle and (only is None or "docstatus" in only):
        out["docstatus"] = tables.DOCSTATUS[row["docstatus"]]
    for name in ("created_at", "updated_at"):
        if only is None or name in only:
            out[name] = row[name].isoformat()
    if only is None or "owner" in only:
        out["owner"] = row["owner"]
    return out


async def load_children(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    ids: Sequence[uuid.UUID],
    catalog: Catalog,
) -> dict[uuid.UUID, dict[str, list[dict[str, Any]]]]:
    out: dict[uuid.UUID, dict[str, list[dict[str, Any]]]] = {i: {} for i in ids}
    if not ids:
        return out
    for field_name, child in resource.children.items():
        statement, args = sql.child_rows(child, tenant, ids)
        child_specs = {c.field: c for c in child.columns if c.field}
        decls = {
            f.name: f
            for f in tables.child_fields(resource.fields[field_name], resource.module, catalog.entities)
        }
        for row in await conn.fetch(statement, *args):
            item = {
                name: records.present(decls[name], row[col.name])
                for name, col in child_specs.items()
                if name is not None and name in decls
            }
            out[row["parent_id"]].setdefault(field_name, []).append(item)
    return out


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # aiohttp raises 413 past client_max_size
    try:
        body = json.loads(raw, parse_float=Decimal) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(
            f"the body is not valid JSON: {exc}", code="SVC.REQUEST.MALFORMED_JSON"
        ) from exc
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object", code="SVC.REQUEST.MALFORMED_JSON")
    return body


# --- handlers ----------------------------------------------------------------------------


async def list_records(request: web.Request) -> web.Response:
    workspace, principal, catalog = await resolve(request, action="list")
    resource = _resource(catalog, request, "list", siblings=_COLLECTION)
    access = guards.check(principal, resource, "list")  # permission, hidden fields, row scope
    query = guards.list_query(access, request.query.items())
    columns = None
    if query.fields is not None:
        wanted = (
            set(query.fields) | {"id"} | {f"ext_{ns}" for ns in query.fields if ns in resource.extensions}
        )
        columns = [c.name for c in resource.table.columns if (c.field or c.name) in wanted]
    statement, args = sql.select_list(resource.table, query, workspace.tenant_id, columns)
    pool = request.app[state.POOL]
    async with pool.acquire() as conn:
        try:
            rows = await conn.fetch(statement, *args)
        except asyncpg.DataError as exc:  # a value Postgres cannot compare (out of its range)
            raise errors.BadRequest(
                f"a filter value is out of range: {exc}", code="SVC.QUERY.INVALID"
            ) from exc
        total = None
        if query.count:
            count_sql, count_args = sql.count(resource.table, query, workspace.tenant_id)
            total = await conn.fetchval(count_sql, *count_args)
        kids: dict[uuid.UUID, dict[str, list[dict[str, Any]]]] = {}
        if resource.children and (query.fields is None or set(query.fields) & set(resource.children)):
            kids = await load_children(conn, resource, workspace.tenant_id, [r["id"] for r in rows], catalog)
    data = [
        access.view(present(resource, r, kids.get(r["id"]), surface="list", only=query.fields)) for r in rows
    ]
    return reply({"data": data, "limit": query.limit, "offset": query.offset, "total": total})


async def find_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await resolve(request, action="find")
    resource = _resource(catalog, request, "find", siblings=_ITEM)
    access = guards.check(principal, resource, "find")
    record_id = parse_record_id(request)
    cache = request.app[state.CACHE]
    key = (resource.table.name, workspace.tenant_id, record_id)
    epoch = cache.epoch
    ttl = None if access.narrowed else resource.cache_ttl  # a narrowed view is neither served nor kept
    if ttl is not None and (hit := await cache.lookup(key, catalog)) is not None:
        return web.Response(text=hit.body, content_type="application/json", headers={"ETag": hit.etag})
    async with request.app[state.POOL].acquire() as conn:
        row = await select_record(conn, resource, workspace.tenant_id, record_id, principal=principal)
        kids = (
            await load_children(conn, resource, workspace.tenant_id, [record_id], catalog)
            if resource.children
            else {}
        )
    body, etag = (
        dumps({"data": access.view(present(resource, row, kids.get(record_id)))}),
        f'"{row["version"]}"',
    )
    if ttl is not None:
        cache.put(key, epoch=epoch, ttl=ttl, catalog=catalog, body=body, etag=etag)
    return web.Response(text=body, content_type="application/json", headers={"ETag": etag})


async def create_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await resolve(request)
    resource = _resource(catalog, request, "create", siblings=_COLLECTION)
    body = await _body(request)
    submit = documents.create_submits(resource, request.query, body)  # ?submit=true
    access = guards.check(principal, resource, "create", *(["submit"] if submit else []))
    body = guards.writable(access, body, create=True)  # row-scope fields filled from the caller
    values = writing.validate_body(resource, body, partial=False, catalog=catalog)
    write = auditing.Write.of(request, principal, catalog, resource, workspace.tenant_id)
    async with request.app[state.POOL].acquire() as conn:
        try:
            async with conn.transaction():
                await writing.check_relations(conn, resource, workspace.tenant_id, values)
                values = await filling.prepare_create(  # derived values, natural keys, guards
                    conn, resource, workspace.tenant_id, principal, body, values, submitting=submit
                )
                await guards.before_create(conn, access, workspace.tenant_id, values)  # scopes, dates
                columns, children = writing.split(resource, values)
                columns.update(documents.initial_state(submit))
                statement, args = sql.insert(
                    resource.table, workspace.tenant_id, columns, owner=principal.username
                )
                row = await conn.fetchrow(statement, *args)
                assert row is not None
                await writing.write_children(conn, resource, workspace.tenant_id, row["id"], children)
                await documents.created(conn, write, row, submitted=submit)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
        kids = (
            await load_children(conn, resource, workspace.tenant_id, [row["id"]], catalog)
            if resource.children
            else {}
        )
    location = f"/{workspace.slug}/api/{resource.module}/{resource.name}/{row['id']}"
    return reply(
        {"data": access.view(present(resource, row, kids.get(row["id"])))},
        status=201,
        headers={"Location": location, "ETag": f'"{row["version"]}"'},
    )


def if_match(request: web.Request) -> int | None:
    header = request.headers.get("If-Match")
    if header is None:
        return None
    value = header.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise errors.BadRequest(
            'If-Match must be a version in quotes, e.g. If-Match: "3"', code="SVC.REQUEST.IF_MATCH"
        )
    return int(value)


async def update_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await resolve(request)
    resource = _resource(catalog, request, "update", siblings=_ITEM)
    access = guards.check(principal, resource, "update")
    record_id = parse_record_id(request)
    expected = if_match(request)
    body = await _body(request)
    values = writing.validate_body(resource, guards.writable(access, body), partial=True, catalog=catalog)
    tenant = workspace.tenant_id
    async with request.app[state.POOL].acquire() as conn:
        try:
            async with conn.transaction():
                current = await select_record(
                    conn, resource, tenant, record_id, principal=principal, lock=True
                )
                if expected is not None and current["version"] != expected:
                    raise errors.PreconditionFailed(
                        f"the record is at version {current['version']}, not {expected}",
                        headers={"ETag": f'"{current["version"]}"'},
                    )
                if resource.lifecycle and current["docstatus"] != 0:
                    raise errors.Conflict(
                        "only draft documents can be updated", code="SVC.DOC.UPDATE_NOT_DRAFT"
                    )
                await writing.check_relations(conn, resource, tenant, values)
                values = await filling.prepare_update(  # derived values over the merged record, guards
                    conn, resource, tenant, principal, current, body, values
                )
                await guards.before_update(conn, access, tenant, current, values)  # scopes, dates
                columns, children = writing.split(resource, values)
                write = auditing.Write.of(request, principal, catalog, resource, tenant)
                trail = await auditing.begin(conn, write, "update", current)
                row = await conn.fetchrow(
                    *sql.flat(sql.update(resource.table, tenant, record_id, columns, expected_version=None))
                )
                assert row is not None
                await caching.announce(conn, resource, tenant, record_id)  # every process, at commit
                await writing.write_children(conn, resource, tenant, record_id, children)
                await trail.finish(conn, row)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
        kids = await load_children(conn, resource, tenant, [record_id], catalog) if resource.children else {}
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    return reply(
        {"data": access.view(present(resource, row, kids.get(record_id)))},
        headers={"ETag": f'"{row["version"]}"'},
    )


async def delete_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await resolve(request)
    resource = _resource(catalog, request, "delete", siblings=_ITEM)
    guards.check(principal, resource, "delete")
    record_id = parse_record_id(request)
    tenant = workspace.tenant_id
    async with request.app[state.POOL].acquire() as conn:
        try:
            async with conn.transaction():
                current = await select_record(
                    conn, resource, tenant, record_id, principal=principal, lock=True
                )
                documents.check_delete(resource, current)  # drafts only
                await filling.check_action(conn, resource, tenant, principal, current, "delete")
                write = auditing.Write.of(request, principal, catalog, resource, tenant)
                trail = await auditing.begin(conn, write, "delete", current)
                await writing.release_references(conn, catalog, resource, tenant, record_id)
                for child in resource.children.values():
                    await conn.execute(*sql.flat(sql.delete_children(child, tenant, record_id)))
                result = await conn.execute(*sql.flat(sql.delete(resource.table, tenant, record_id)))
                await caching.announce(conn, resource, tenant, record_id)
                await trail.finish(conn, None)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    if not result.endswith(" 1"):
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND")
    return web.Response(status=204)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/{ws}/api/{module}/{entity}", list_records)
    app.router.add_post("/{ws}/api/{module}/{entity}", create_record)
    app.router.add_get("/{ws}/api/{module}/{entity}/{id}", find_record)
    app.router.add_patch("/{ws}/api/{module}/{entity}/{id}", update_record)
    app.router.add_delete("/{ws}/api/{module}/{entity}/{id}", delete_record)
