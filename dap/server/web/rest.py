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

import logging
import uuid
from typing import Any

import asyncpg
from aiohttp import web

from dap.server import errors, state
from dap.server.access import guards
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, filling, idempotency, lifecycle, reading, writing
from dap.server.events import builtin
from dap.server.storage import caching, db, sql
from dap.server.web import delivery, files, filters, requests, services
from dap.server.workflows import recording

log = logging.getLogger(__name__)


_COLLECTION = (("list", "GET"), ("create", "POST"))
_ITEM = (("find", "GET"), ("update", "PATCH"), ("delete", "DELETE"))


# --- handlers ----------------------------------------------------------------------------


async def list_records(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request, action="list")
    resource = requests.exposed(catalog, request, "list", siblings=_COLLECTION)
    access = guards.check(principal, resource, "list")  # permission, hidden fields, row scope
    pairs = list(request.query.items())
    guards.check_named(access, pairs)
    query = guards.scoped(access, filters.parse(resource, pairs))
    columns = None
    if query.fields is not None:
        wanted = (
            set(query.fields) | {"id"} | {f"ext_{ns}" for ns in query.fields if ns in resource.extensions}
        )
        columns = [c.name for c in resource.table.columns if (c.field or c.name) in wanted]
    statement, args = sql.select_list(resource.table, query, workspace.tenant_id, columns)
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:
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
            kids = await reading.load_children(
                conn, resource, workspace.tenant_id, [r["id"] for r in rows], catalog
            )
    data = [
        access.view(reading.present(resource, r, kids.get(r["id"]), surface="list", only=query.fields))
        for r in rows
    ]
    return requests.reply({"data": data, "limit": query.limit, "offset": query.offset, "total": total})


async def find_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request, action="find")
    resource = _item(catalog, request, "find")
    access = guards.check(principal, resource, "find")
    record_id = requests.parse_record_id(request)
    cache = request.app[state.CACHE]
    key = (resource.table.name, workspace.tenant_id, record_id)
    epoch = cache.epoch
    ttl = None if access.narrowed else resource.cache_ttl  # a narrowed view is neither served nor kept
    if ttl is not None and (hit := await cache.lookup(key, catalog)) is not None:
        return requests.json_response(hit.body, hit.etag)
    async with db.connection(request.app[state.POOL]) as conn:
        row = await guards.select_record(
            conn, resource, workspace.tenant_id, record_id, principal=principal, scope=access.scope
        )
        kids = (
            await reading.load_children(conn, resource, workspace.tenant_id, [record_id], catalog)
            if resource.children
            else {}
        )
    body, etag = (
        requests.encode({"data": access.view(reading.present(resource, row, kids.get(record_id)))}),
        f'"{row["version"]}"',
    )
    if ttl is not None:
        cache.put(key, epoch=epoch, ttl=ttl, catalog=catalog, body=body, etag=etag)
    return requests.json_response(body, etag)


async def create_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = requests.exposed(catalog, request, "create", siblings=_COLLECTION)
    key = idempotency.key_of(request.headers)
    body = await requests.read_body(request)
    digest = idempotency.fingerprint(principal.sub, request.path_qs, body) if key is not None else b""
    submit = lifecycle.create_submits(resource, request.query, body)  # ?submit=true
    access = guards.check(principal, resource, "create", *(["submit"] if submit else []))
    body = guards.writable(access, body, create=True)  # row-scope fields filled from the caller
    values = writing.validate_body(resource, body, partial=False, catalog=catalog)
    tenant = workspace.tenant_id
    write = requests.write_of(request, principal, catalog, resource, tenant)
    async with db.connection(request.app[state.POOL]) as conn:
        try:
            async with db.committed(conn):
                stored = await idempotency.claim(conn, tenant, key, digest) if key is not None else None
                if stored is not None:
                    return requests.respond(stored)
                done = await recording.create(conn, write, access, body, values, submit=submit)
                row, kids, event = done.row, done.children, done.event
                answer = idempotency.Answer(
                    201,
                    requests.dumps({"data": access.view(reading.present(resource, row, kids))}),
                    {
                        "Location": f"/{workspace.slug}/api/{resource.module}/{resource.name}/{row['id']}",
                        "ETag": f'"{row["version"]}"',
                    },
                )
                if key is not None:
                    await idempotency.store(conn, tenant, key, digest, answer)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    settled = await delivery.settle(request, resource, "created", event)
    return delivery.stamp(requests.respond(answer), settled)


async def update_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _item(catalog, request, "update")
    access = guards.check(principal, resource, "update")
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    body = guards.writable(access, await requests.read_body(request))
    values = writing.validate_body(resource, body, partial=True, catalog=catalog)
    tenant = workspace.tenant_id
    write = requests.write_of(request, principal, catalog, resource, tenant)
    async with db.connection(request.app[state.POOL]) as conn:
        try:
            async with db.committed(conn):
                done = await recording.update(conn, write, access, record_id, body, values, expected=expected)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    settled = await delivery.settle(request, resource, "updated", done.event)
    return delivery.stamp(
        requests.reply(
            {"data": access.view(reading.present(resource, done.row, done.children))},
            headers={"ETag": f'"{done.row["version"]}"'},
        ),
        settled,
    )


async def delete_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _item(catalog, request, "delete")
    guards.check(principal, resource, "delete")
    record_id = requests.parse_record_id(request)
    tenant = workspace.tenant_id
    async with db.connection(request.app[state.POOL]) as conn:
        try:
            async with db.committed(conn):
                current = await guards.select_record(
                    conn, resource, tenant, record_id, principal=principal, lock=True
                )
                lifecycle.check_delete(resource, current)  # drafts only
                await filling.check_action(conn, resource, tenant, principal, current, "delete")
                write = requests.write_of(request, principal, catalog, resource, tenant)
                trail = await auditing.begin(conn, write, "delete", current)
                cascaded = await writing.release_references(conn, catalog, resource, tenant, record_id)
                for child in resource.children.values():
                    await conn.execute(*sql.flat(sql.delete_children(child, tenant, record_id)))
                result = await conn.execute(*sql.flat(sql.delete(resource.table, tenant, record_id)))
                await caching.announce(conn, resource, tenant, record_id)
                await trail.finish(conn, None)
                event = await builtin.record(conn, write, "delete", current)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    if not result.endswith(" 1"):
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND")
    files.forget(request.app, tenant, [(resource.table.name, record_id), *cascaded])  # file bytes
    return delivery.stamp(
        web.Response(status=204), await delivery.settle(request, resource, "deleted", event)
    )


def _not_a_service_action(catalog: Catalog, request: web.Request) -> None:
    """``/{module}/{service}/{action}`` takes POST only (``web.services``): 405 for any other method
    of a served action, 404 for an action the service does not serve over REST."""
    module, name = request.match_info["module"], request.match_info["entity"]
    if services.target(catalog, module, name) != "service":
        return
    if not services.serves(catalog, module, name, request.match_info["id"]):
        raise errors.NotFound(f"{module}/{name} serves no such action", code="SVC.ACTION.NOT_FOUND")
    raise errors.MethodNotAllowed(f"{request.method} is not a method of a service action", allow=["POST"])


def _item(catalog: Catalog, request: web.Request, action: str) -> Resource:
    """The resource of a record's path opted into ``action``, after the service-action check."""
    _not_a_service_action(catalog, request)
    return requests.exposed(catalog, request, action, siblings=_ITEM)


async def _other_method(request: web.Request) -> web.Response:
    """Any other method on an entity's paths: 405 whose ``Allow`` lists what this entity exposes
    (the router's own 405 would list every route, exposed or not)."""
    catalog = request.app[state.SPEC].current
    module, name = request.match_info["module"], request.match_info["entity"]
    if "id" in request.match_info:
        _not_a_service_action(catalog, request)
    resource = catalog.resource(module, name)
    siblings = _ITEM if "id" in request.match_info else _COLLECTION
    exposed = [method for action, method in siblings if resource is not None and action in resource.actions]
    if resource is None or not exposed:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    raise errors.MethodNotAllowed(f"{request.method} is not a method of this path", allow=exposed)


async def _post_item(request: web.Request) -> web.Response:
    """POST on a record's path: a service action where the catalog declares that service
    (``web.services``), else the 405 of any other method."""
    catalog = request.app[state.SPEC].current
    if services.target(catalog, request.match_info["module"], request.match_info["entity"]) == "service":
        return await services.service_action(request)
    return await _other_method(request)


# A module is an identifier (``[a-z][a-z0-9_]*``), so a segment starting with ``_`` is never one:
# ``/{ws}/api/_approvals/{id}`` and ``/{ws}/api/_notifications/read`` pass these routes by, and
# they can be registered first. The router tries every ``/{ws}/…`` route in registration order,
# one regular expression each, and these carry the load (find by id was the tenth).
COLLECTION_PATH = "/{ws}/api/{module:[^_/][^/]*}/{entity}"
ITEM_PATH = COLLECTION_PATH + "/{id}"


def add_routes(app: web.Application) -> None:
    """The entity routes; registered before every other ``/{ws}/…`` route (see ``COLLECTION_PATH``)."""
    app.router.add_get(COLLECTION_PATH, list_records, allow_head=False)
    app.router.add_post(COLLECTION_PATH, create_record)
    app.router.add_route("*", COLLECTION_PATH, _other_method)
    app.router.add_get(ITEM_PATH, find_record, allow_head=False)
    app.router.add_patch(ITEM_PATH, update_record)
    app.router.add_delete(ITEM_PATH, delete_record)
    app.router.add_post(ITEM_PATH, _post_item)
    app.router.add_route("*", ITEM_PATH, _other_method)
