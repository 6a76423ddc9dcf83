"""File fields over REST: ``PUT`` and ``GET /{ws}/api/{module}/{entity}/{id}/_files/{field}``.

``PUT`` is a write of that one field and follows every rule of a ``PATCH`` of it
(``workflows.recording``): ``expose`` must open ``update`` (else 405), the caller needs the
``update`` permission and the field's own ``required_permission`` (403), the record must be in the
caller's row scope, at the ``If-Match`` version (412) and, for a document, a draft (409
``SVC.DOC.UPDATE_NOT_DRAFT``); the change is audited and emits ``updated``. These are checked
before the body is read and again in the transaction that stores the file's token. The body (its
``Content-Type`` is the file's MIME type, ``X-File-Name`` its name) streams into ``storage.files``
under the tenant, refused past the field's ``storage.max_bytes`` or, where the field sets none,
``--max-file-bytes`` (413, from ``Content-Length`` first and while streaming), or for a type outside
``storage.accept`` (415; globs such as ``image/*``) or a media range sent as the type (415: it
would be stored, and answered, as the file's type).

``GET`` (``find`` exposed and permitted, row scope, a hidden field stays hidden) streams the bytes
back with their type, as an attachment unless the type is a raster image, with ``nosniff`` and a
``sandbox`` CSP: an uploaded HTML or SVG file never runs as a page of the UI's origin. The
record's files go when it is deleted (``rest.delete_record`` calls :func:`forget`), and so do those
of the records its relations' ``on_delete: cascade`` deleted with it. Only a ``file`` field's bytes
live here; storage on an object store (``storage.datastore``) is not connected: such a field
answers 501.
"""

from __future__ import annotations

import fnmatch
import urllib.parse
import uuid

import asyncpg
from aiohttp import web

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server import errors, state
from dap.server.access import guards
from dap.server.catalog import Resource
from dap.server.documents import writing
from dap.server.storage import db, files
from dap.server.web import delivery, requests
from dap.server.workflows import recording

FILES = state.FILES
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


_ITEM = (("find", "GET"), ("update", "PUT"))
# Shown in the browser only these raster image types: none of them can carry script. Everything
# else (HTML, SVG, PDF, XML, unknown) is a download, so a stored file never runs on the UI's origin.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"})


def disposition(mime: str, name: str) -> str:
    """``Content-Disposition`` for a stored file (RFC 6266): inline only for :data:`INLINE_TYPES`.

    The plain ``filename`` is an ASCII stand-in (quotes, backslashes and controls replaced), the
    exact name travels in ``filename*`` (RFC 8187). Pure.
    """
    kind = "inline" if mime.split(";")[0].strip().lower() in INLINE_TYPES else "attachment"
    if not name:
        return kind
    plain = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"{kind}; filename=\"{plain}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


def _accepts(f: Field, mime: str) -> bool:
    accept = f.storage.accept if f.storage else ()
    return not accept or any(fnmatch.fnmatchcase(mime, pattern) for pattern in accept)


async def upload(request: web.Request) -> web.Response:
    """A write of one field, like ``PATCH {field: …}``: the same expose, permission, row-scope,
    ``If-Match`` and document-state rules (``workflows.recording``), checked before the bytes are
    streamed and again in the transaction that stores the file's token."""
    workspace, principal, catalog = await requests.resolve(request)
    resource = requests.exposed(catalog, request, "update", siblings=_ITEM)
    access = guards.check(principal, resource, "update")
    f, column = _field(resource, request.match_info["field"])
    guards.writable(access, {f.name: None})  # 403 for a field the caller may not write
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    tenant = workspace.tenant_id
    limit = (
        f.storage.max_bytes
        if f.storage and f.storage.max_bytes
        else request.app[state.OPTIONS].max_file_bytes
    )
    mime = request.content_type or "application/octet-stream"
    if "*" in mime:  # a client generated from a document's content key (`*/*`, `image/*`) sends it
        raise errors.UnsupportedMediaType(
            f"{mime} is a media range, not a file's type: send the file's own type as Content-Type "
            "(application/octet-stream when it is not known)",
            code="SVC.FILE.TYPE",
        )
    if not _accepts(f, mime):
        raise errors.UnsupportedMediaType(
            f"{f.name} accepts {', '.join(f.storage.accept if f.storage else ())}, not {mime}",
            code="SVC.FILE.TYPE",
        )
    if request.content_length is not None and request.content_length > limit:
        raise errors.PayloadTooLarge(f"{f.name} takes at most {limit} bytes", code="SVC.FILE.TOO_LARGE")
    store = request.app[FILES]
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:  # refuse what the write would refuse before streaming
        current = await guards.select_for_write(
            conn, resource, tenant, record_id, principal=principal, expected=expected
        )
        recording.refuse_unless_draft(access, current)
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
    body = {f.name: stored.token}
    values = writing.validate_body(resource, body, partial=True, catalog=catalog)
    write = requests.write_of(request, principal, catalog, resource, tenant)
    try:
        async with db.connection(pool) as conn:
            try:
                async with db.committed(conn):
                    # locked first: a concurrent upload's token read unlocked here would be stale
                    # by the time the update holds the row, and the wrong file would be removed
                    locked = await guards.select_record(
                        conn, resource, tenant, record_id, principal=principal, lock=True
                    )
                    before = locked[column]
                    done = await recording.update(
                        conn, write, access, record_id, body, values, expected=expected
                    )
            except asyncpg.PostgresError as exc:
                raise writing.translate(resource, exc) from exc
    except BaseException:
        store.drop(stored)
        raise
    store.keep(stored)
    if isinstance(before, str) and before:
        store.remove(tenant, resource.table.name, record_id, f.name, before)
    request.app[state.CACHE].invalidate((resource.table.name, tenant, record_id))
    settled = await delivery.settle(request, resource, "updated", done.event)
    return delivery.stamp(
        requests.reply(
            {"data": access.view(done.presented(resource))},
            headers={"ETag": f'"{done.row["version"]}"'},
        ),
        settled,
    )


async def download(request: web.Request) -> web.StreamResponse:
    workspace, principal, catalog = await requests.resolve(request, action="find")
    resource = requests.exposed(catalog, request, "find", siblings=_ITEM)
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
    return web.FileResponse(
        path,
        headers={
            "Content-Type": mime,
            "Content-Disposition": disposition(mime, str(meta.get("name") or "")),
            "X-Content-Type-Options": "nosniff",
            # a file opened anyway (typed URL, old browser) runs no script and reaches no origin
            "Content-Security-Policy": "sandbox",
        },
    )


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
