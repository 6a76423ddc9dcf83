"""The OpenAPI paths of file fields (``web.files``): ``PUT``/``GET …/{id}/_files/{field}``.

One path per file field, the field's name written out (it is no parameter: any other name is 404).
``PUT`` where the entity exposes ``update``, ``GET`` where it exposes ``find`` (the other answers
405, as a PATCH or GET of the record would). ``PUT`` takes the raw bytes as the body, with optional
``If-Match`` and ``X-File-Name``; it answers the record and its ``ETag``. Where the field's
``storage.accept`` narrows the types, the body is documented as those types (globs included);
where it takes any, as ``application/octet-stream`` (the type the server stores when the upload
names none), not ``*/*``: a client generator reads a media range as a type to send (and
openapi-python-client leaves the operation out), and any other type is still taken, as the body's
description says. ``GET`` answers the bytes with their stored type (documented as the field's
types or, where it takes any, ``application/octet-stream`` and then ``*/*``: generators type the
first they know), ``X-Content-Type-Options: nosniff``, ``Content-Security-Policy: sandbox`` and a
``Content-Disposition`` (``attachment``, except for a safe list of raster image types). A field
stored on an object store (``storage.datastore``) answers 501, so it is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.catalog import Resource

BINARY: dict[str, Any] = {"type": "string", "format": "binary"}
FILE_NAME = {
    "name": "X-File-Name",
    "in": "header",
    "schema": {"type": "string"},
    "description": "the file's name, kept with it (its first 255 characters)",
}
DOWNLOAD_HEADERS = {
    "Content-Disposition": {
        "schema": {"type": "string"},
        "description": "attachment (with the file's name), inline only for a safe list of raster images",
    },
    "X-Content-Type-Options": {"schema": {"type": "string", "enum": ["nosniff"]}},
    "Content-Security-Policy": {"schema": {"type": "string"}, "description": "sandbox"},
}


def served(resource: Resource) -> list[Field]:
    """The file fields of ``resource`` whose bytes this server holds (pure)."""
    return [
        f
        for f in resource.fields.values()
        if f.type is FieldType.FILE
        and resource.table.column_for(f.name) is not None
        and not (f.storage is not None and f.storage.datastore)
    ]


OCTETS = "application/octet-stream"
ANY_TYPE = (
    "the file's bytes; the field takes any type: send the file's own as Content-Type (else it is "
    "stored as application/octet-stream) and it is answered with it"
)


def _accepted(f: Field) -> tuple[str, ...]:
    return f.storage.accept if f.storage is not None else ()


def _upload(f: Field) -> dict[str, Any]:
    """The body of a ``PUT``: the types the field accepts, else (any type) ``application/octet-stream``."""
    accept = _accepted(f)
    body: dict[str, Any] = {"required": True, "content": {t: {"schema": BINARY} for t in accept or (OCTETS,)}}
    if not accept:
        body["description"] = ANY_TYPE
    return body


def _download(f: Field) -> dict[str, Any]:
    """The answer of a ``GET``: the stored type, one the field accepts."""
    return {t: {"schema": BINARY} for t in _accepted(f) or (OCTETS, "*/*")}


def paths(
    resource: Resource,
    *,
    responses: Callable[..., dict[str, Any]],
    if_match: dict[str, Any],
    id_param: dict[str, Any],
    tag: list[str],
) -> dict[str, Any]:
    """``/api/{module}/{entity}/{id}/_files/{field}`` of every served file field."""
    r = resource
    one = {"type": "object", "properties": {"data": {"$ref": f"#/components/schemas/{r.module}.{r.name}"}}}
    out: dict[str, Any] = {}
    for f in served(r):
        item: dict[str, Any] = {"parameters": [id_param]}
        limit = f.storage.max_bytes if f.storage is not None else None
        if "update" in r.actions:
            item["put"] = {
                "operationId": f"upload_{r.module}_{r.name}_{f.name}",
                "tags": tag,
                "summary": f"Store the file of {f.name} (the raw body)"
                + (f", at most {limit} bytes" if limit is not None else ""),
                "parameters": [if_match, FILE_NAME],
                "requestBody": _upload(f),
                "responses": responses(
                    {
                        "200": {
                            "description": "stored: the record",
                            "headers": {"ETag": {"schema": {"type": "string"}}},
                            "content": {"application/json": {"schema": one}},
                        }
                    },
                    400,
                    403,
                    405,
                    409,
                    412,
                    413,
                    415,
                    422,
                ),
            }
        if "find" in r.actions:
            item["get"] = {
                "operationId": f"download_{r.module}_{r.name}_{f.name}",
                "tags": tag,
                "summary": f"The file of {f.name}, as stored",
                "responses": responses(
                    {
                        "200": {
                            "description": "the bytes",
                            "headers": DOWNLOAD_HEADERS,
                            "content": _download(f),
                        }
                    },
                    403,
                    405,
                ),
            }
        if len(item) > 1:
            out[f"/api/{r.module}/{r.name}/{{id}}/_files/{f.name}"] = item
    return out
