"""File fields over REST: ``PUT`` and ``GET /{ws}/api/{module}/{entity}/{id}/_files/{field}``.

``PUT`` streams the body (its ``Content-Type`` is the file's MIME type, ``X-File-Name`` its name)
into ``storage.files`` under the tenant, refusing past the field's ``storage.max_bytes`` (413,
checked from ``Content-Length`` first and while streaming) or a type outside ``storage.accept``
(415; globs such as ``image/*``), then stores the file's token in the record's column in one
transaction (``version + 1``; needs the ``update`` permission and the record in the caller's row
scope) and answers the record. ``GET`` streams the stored bytes back with their type (``find``
permission, row scope, a hidden field stays hidden). The record's files go when it is deleted
(``rest.delete_record`` calls :func:`forget`), and so do those of the records its relations'
``on_delete: cascade`` deleted with it. Only a ``file`` field's bytes live here; storage on
an object store (``storage.datastore``) is not connected: such a field answers 501.
"""

from __future__ import annotations

import fnmatch
import uuid

from aiohttp import web

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server import errors, state
from dap.server.access import guards
from dap.server.catalog import Resource
from dap.server.documents import reading
from dap.server.storage import caching, db, files, sql
from dap.server.web import requests

FILES: web.AppKey[files.FileStore] = web.AppKey("files", files.FileStore)
PATH = "/{ws}/api/{module}/{entity}/{id}/_files/{field}"


def _field(resource: Resource, name: str) -> tuple[Field, str]:
    f = resource.fields.get(name)
    column = resource.table.column_for(name)
    if f is None or column is None or f.type is not FieldType.FILE:
        raise errors.NotFound(f"{resource.key} has no file field {name!r}", code="SVC.FILE.NOT_FOUND")
    if f.storage is not None and f.storage.datastore:
        raise errors.NotImplementedHere(
            f"{name} stores its bytes in datastore {f.storage.datastore!r}; object stores are not "
            "connected yet (leave storage.datastore out to use the local filesystem)",
            code="SVC.FILE.BACKEND_NOT_CONNECTED",
        )
    return f, column.name


def _resource(request: web.Request) -> Resource:
    catalog = request.app[state.SPEC].current
    resource = catalog.resource(request.match_info["module"], request.match_info["entity"])
    if resource is None:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    return resource


def _accepts(f: Field, mime: str) -> bool:
    accept = f.storage.accept if f.storage else ()
    return not accept or any(fnmatch.fnmatchcase(mime, pattern) for pattern in accept)


async def upload(request: web.Request) -> web.Response:
    workspace, principal, _catalog = await requests.resolve(request)
    resource = _resource(request)
    access = guards.check(principal, resource, "update")
    f, column = _field(resource, request.match_info["field"])
    record_id = requests.parse_record_id(request)
    tenant = workspace.tenant_id
    limit = f.storage.max_bytes if f.storage else None
    mime = request.content_type or "application/octet-stream"
    if not _accepts(f, mime):
        raise errors.UnsupportedMediaType(
            f"{f.name} accepts {', '.join(f.storage.accept if f.storage else ())}, not {mime}",
            code="SVC.FILE.TYPE",
        )
    if limit is not None and request.content_length is not None and request.content_length > limit:
        raise errors.PayloadTooLarge(f"{f.name} takes at most {limit} bytes", code="SVC.FILE.TOO_LARGE")
    store = request.app[FILES]
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:  # the record must exist in the caller's scope first
        await guards.select_record(conn, resource, tenant, record_id, principal=principal)
    try:
        stored = await store.receive(
            request.content.iter_chunked(files.CHUNK),
            tenant=tenant,
            table=resource.table.name,
            record_id=record_id,
            field=f.name,
            max_bytes=limit,
            name=request.headers.get("X-File-Name", "")[:255],
            mime=mime,
        )
    except files.TooLargeError as exc:
        raise errors.PayloadTooLarge(f"{f.name}: {exc}", code="SVC.FILE.TOO_LARGE") from exc
    try:
        async with db.connection(pool) as conn, db.committed(conn):
            current = await guards.select_record(
                conn, resource, tenant, record_id, principal=principal, lock=True
            )
            before = current[column]
            statement, args = sql.update(
                resource.table, tenant, record_id, {column: stored.token}, expected_version=None
            )
            row = await conn.fetchrow(statement, *args)
            await caching.announce(conn, resource, tenant, record_id)
    except BaseException:
        store.drop(stored)
        raise
    store.keep(stored)
    if isinstance(before, str) and before:
        store.remove(tenant, resource.table.name, record_id, f.name, before)
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    assert row is not None
    return requests.reply(
        {"data": access.view(reading.present(resource, row))}, headers={"ETag": f'"{row["version"]}"'}
    )


async def download(request: web.Request) -> web.StreamResponse:
    workspace, principal, _catalog = await requests.resolve(request, action="find")
    resource = _resource(request)
    access = guards.check(principal, resource, "find")
    f, column = _field(resource, request.match_info["field"])
    if f.name in access.hidden:
        raise errors.Forbidden(f"{f.name} needs {access.hidden[f.name]}", code="SVC.FILE.HIDDEN")
    record_id = requests.parse_record_id(request)
    async with db.connection(request.app[state.POOL]) as conn:
        row = await guards.select_record(conn, resource, workspace.tenant_id, record_id, principal=principal)
    token = row[column]
    store = request.app[FILES]
    try:
        path = store.path(workspace.tenant_id, resource.table.name, record_id, f.name, token or "")
    except FileNotFoundError:
        path = None
    if not token or path is None or not path.is_file():
        raise errors.NotFound(f"{f.name} of this record holds no file", code="SVC.FILE.EMPTY")
    meta = store.meta(path)
    mime = str(meta.get("mime") or "application/octet-stream")
    return web.FileResponse(path, headers={"Content-Type": mime, "X-Content-Type-Options": "nosniff"})


def forget(app: web.Application, tenant: uuid.UUID, records: list[tuple[str, uuid.UUID]]) -> None:
    """Remove the files of deleted records, each ``(table, id)``: the one a DELETE named and those
    its ``on_delete: cascade`` relations deleted with it (``writing.release_references``)."""
    store = app.get(FILES)
    if store is not None:
        for table, record_id in records:
            store.remove_record(tenant, table, record_id)


def add_routes(app: web.Application) -> None:
    app[FILES] = files.FileStore(files.default_root())
    app.router.add_put(PATH, upload)
    app.router.add_get(PATH, download)
