"""The OpenAPI paths of file fields (``web.files``): ``PUT``/``GET …/{id}/_files/{field}``.

One path per file field, the field's name written out (it is no parameter: any other name is 404).
``PUT`` where the entity exposes ``update``, ``GET`` where it exposes ``find`` (the other answers
405, as a PATCH or GET of the record would). ``PUT`` takes the raw bytes as the body, of any type
unless the field's ``storage.accept`` narrows it (then those types, globs included), with optional
``If-Match`` and ``X-File-Name``; it answers the record and its ``ETag``. ``GET`` answers the bytes
with their stored type, ``X-Content-Type-Options: nosniff``, ``Content-Security-Policy: sandbox``
and a ``Content-Disposition`` (``attachment``, except for a safe list of raster image types). A
field stored on an object store (``storage.datastore``) answers 501, so it is left out.
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


def _media(f: Field) -> dict[str, Any]:
    accept = f.storage.accept if f.storage is not None else ()
    return {mime: {"schema": BINARY} for mime in (accept or ("*/*",))}


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
                "requestBody": {"required": True, "content": _media(f)},
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
                    {"200": {"description": "the bytes", "headers": DOWNLOAD_HEADERS, "content": _media(f)}},
                    403,
                    405,
                ),
            }
        if len(item) > 1:
            out[f"/api/{r.module}/{r.name}/{{id}}/_files/{f.name}"] = item
    return out
