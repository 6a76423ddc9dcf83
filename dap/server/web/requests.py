"""The request and reply plumbing shared by the entity handlers (``rest``, ``moves``, ``trails``).

A handler resolves the workspace (404 when it is not registered), verifies the bearer token for
that workspace (401) and reads the catalog reference once, in that order (:func:`resolve`); ids,
``If-Match`` and JSON bodies are parsed here so that every route answers their errors alike.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

from dap.server import errors, fieldvalues, identity, state
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, idempotency
from dap.server.storage.workspaces import Workspace
from dap.server.workflows import operations


async def resolve(
    request: web.Request, *, action: str | None = None
) -> tuple[Workspace, auth.Principal, Catalog]:
    """Workspace, caller and catalog of a REST request, in that order of checks.

    Without an Authorization header, ``action`` list or find of an entity declaring
    ``auth: {required: false}`` gets the anonymous caller (guards); everything else needs a token.
    """
    app = request.app
    workspace = await app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    catalog = app[state.SPEC].current
    header = request.headers.get("Authorization")
    if header is None and guards.open_to_anonymous(catalog, request.match_info, action):
        return workspace, guards.anonymous(workspace.slug), catalog
    # bind: a token naming no workspace gets the URL's, which row scope and session values see
    principal = await identity.authenticate(
        app, auth.bearer_token(header), workspace=workspace.slug, bind=True
    )
    return workspace, principal, catalog


def parse_record_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["id"])
    except ValueError as exc:
        # a malformed id cannot name a record: 404, as for any id that does not exist
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND") from exc


encode = operations.encode  # the JSON of an answer (see there)


def dumps(data: Any) -> str:
    """:func:`encode` as text (for answers stored as text, such as an ``Idempotency-Key``'s)."""
    return encode(data).decode()


def respond(answer: idempotency.Answer) -> web.Response:
    """An answer kept as text (one an ``Idempotency-Key`` may replay) as the response."""
    return web.Response(
        status=answer.status, text=answer.body, content_type="application/json", headers=answer.headers
    )


def json_response(body: bytes, etag: str) -> web.Response:
    """A 200 of encoded JSON with its ``ETag`` (a find's answer). The media type is given as a
    header: aiohttp's ``content_type=`` argument parses it again (1.5 µs of every find)."""
    return web.Response(body=body, headers={"Content-Type": "application/json", "ETag": etag})


def reply(data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=encode(data), status=status, content_type="application/json", headers=dict(headers or {})
    )


MAX_JSON_DEPTH = 64  # deeper bodies are refused before anything recurses over them
_JSON_TYPES = ("application/json",)


def too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _shape(value: Any, limit: int) -> tuple[bool, bool]:
    """:func:`too_deep` of a value orjson decoded (plain ``dict``, ``list``, ``float``: exact
    types), and whether it holds a float, in one walk: a flat object -- what a record's body is --
    is one pass over its values."""
    if type(value) is dict and limit >= 1 and not _NESTED_OR_FLOAT.intersection(map(type, value.values())):
        return False, False  # a flat object without floats, in C: a record's body (130 bytecodes)
    floats = False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth > limit:
                return True, floats
            for child in item.values() if kind is dict else item:
                if type(child) in _CONTAINERS:
                    stack.append((child, depth + 1))
                elif type(child) is float:
                    floats = True
        elif kind is float:
            floats = True
    return False, floats


_CONTAINERS = (dict, list)
_NESTED_OR_FLOAT = frozenset({dict, list, float})
_EXACT = fieldvalues.EXACT_JSON  # a body's numbers exact, as the value model reads them
_PLAIN = json.JSONDecoder()


def _decode(raw: bytes, decoder: json.JSONDecoder) -> Any:
    """``json.loads(raw, …)`` with a decoder made once (the same encoding detection)."""
    return decoder.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))


def _too_deep() -> errors.BadRequest:
    return errors.BadRequest(
        f"the body nests objects and arrays deeper than {MAX_JSON_DEPTH} levels", code="SVC.REQUEST.TOO_DEEP"
    )


def decode_json(raw: bytes, *, exact_numbers: bool) -> Any:
    """The JSON value of ``raw``, exactly as the standard decoder reads it (400 when malformed or
    nested deeper than :data:`MAX_JSON_DEPTH`).

    orjson reads it first (several times faster on a record's body); its value is kept only when
    it holds no float, where both decoders agree: strings, integers within 64 bits, booleans,
    null, lists and objects (the last of a repeated key). Anything else -- a number with a
    fraction or an exponent (a ``Decimal`` with ``exact_numbers``), an integer past 64 bits (which
    orjson reads as a float), and whatever orjson refuses (a UTF-8 BOM, UTF-16, lone surrogates,
    ``NaN``, malformed JSON) -- is decoded by the standard decoder as before, with its errors.
    """
    try:
        fast = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        deep, floats = _shape(fast, MAX_JSON_DEPTH)
        if deep:
            raise _too_deep()
        if not floats:
            return fast
    try:
        body = _decode(raw, _EXACT if exact_numbers else _PLAIN)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(
            f"the body is not valid JSON: {exc}", code="SVC.REQUEST.MALFORMED_JSON"
        ) from exc
    except RecursionError as exc:
        raise _too_deep() from exc
    if too_deep(body, MAX_JSON_DEPTH):
        raise _too_deep()
    return body


def _media(request: web.Request) -> str:
    """The body's media type: the header itself when it is exactly ``application/json`` (what
    clients send), else as aiohttp parses it (parameters dropped, lower case)."""
    given = request.headers.get("Content-Type")
    return given if given == "application/json" else request.content_type


async def read_json(request: web.Request, *, exact_numbers: bool = False) -> dict[str, Any]:
    """The JSON object of a request body, or a 4xx problem: 415 when it is not JSON, 400 when malformed.

    Every JSON endpoint reads its body here. ``exact_numbers`` parses numbers with a fraction as
    ``Decimal`` (money must not pass through a float).
    """
    raw = await request.read()  # aiohttp raises 413 past client_max_size
    if raw:
        media = _media(request)  # aiohttp answers application/octet-stream when none is sent
        if not (media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))):
            raise errors.UnsupportedMediaType(
                f"the body must be JSON sent as Content-Type: application/json, not {media}"
            )
    body = decode_json(raw, exact_numbers=exact_numbers) if raw else None
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object", code="SVC.REQUEST.MALFORMED_JSON")
    return body


async def read_body(request: web.Request) -> dict[str, Any]:
    """The JSON object of a record's body (numbers with a fraction as ``Decimal``)."""
    return await read_json(request, exact_numbers=True)


def if_match(request: web.Request) -> int | None:
    """The version ``If-Match`` names, ``None`` without the header or for ``*`` (any version).

    RFC 9110 13.1.1: If-Match compares strongly, and a weak validator (``W/"3"``) never matches
    strongly, so it fails the precondition (412) instead of being read as a version.
    """
    header = request.headers.get("If-Match")
    if header is None or header.strip() == "*":
        return None
    value = header.strip()
    if value.startswith("W/"):
        raise errors.PreconditionFailed(
            'If-Match compares strongly and a weak validator never matches: send If-Match: "3"',
            code="SVC.REQUEST.IF_MATCH_WEAK",
        )
    version = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else ""
    if not version.isdigit() or not version.isascii():
        raise errors.BadRequest(
            'If-Match must be a version in quotes, e.g. If-Match: "3"', code="SVC.REQUEST.IF_MATCH"
        )
    return int(version)


def write_of(
    request: web.Request, principal: auth.Principal, catalog: Catalog, resource: Resource, tenant: uuid.UUID
) -> auditing.Write:
    """Who writes what, for the audit rows of a write (the request id ties them to the logs)."""
    return auditing.Write(
        catalog, resource, tenant, principal.sub, principal.username, request.get(state.REQUEST_ID)
    )


# The answers of :func:`exposed` that found a resource, per catalog: ``(module, entity, action)``
# -> the resource. Kept by the catalog's id with the catalog itself (so an id is never reused while
# its entry lives); a spec swap serves a new catalog, which starts with none. Bounded by the
# catalog's resources and actions; a process serves one catalog at a time, tests a few hundred.
_ROUTED: dict[int, tuple[Catalog, dict[tuple[str, str, str], Resource]]] = {}
MAX_CATALOGS = 8


def routed(catalog: Catalog) -> dict[tuple[str, str, str], Resource]:
    """The resources :func:`exposed` found in ``catalog`` (see ``_ROUTED``)."""
    found = _ROUTED.get(id(catalog))
    if found is None or found[0] is not catalog:
        if len(_ROUTED) >= MAX_CATALOGS:
            _ROUTED.clear()
        found = _ROUTED[id(catalog)] = (catalog, {})
    return found[1]


def exposed(
    catalog: Catalog, request: web.Request, action: str, *, siblings: Sequence[tuple[str, str]]
) -> Resource:
    """The resource the path names, opted into ``action`` over REST: 404 when the entity is not
    exposed at all, 405 (``Allow``: the ``siblings`` methods it exposes) when only ``action`` is not.

    Every request of an entity route asks this; a resource found is kept per catalog (``routed``),
    so the next request of the same entity and action is one lookup. Refusals are not kept.
    """
    match = request.match_info
    key = (match["module"], match["entity"], action)
    found = routed(catalog)
    hit = found.get(key)
    if hit is not None:
        return hit
    resource = _exposed(catalog, key, siblings)
    found[key] = resource
    return resource


def _exposed(catalog: Catalog, key: tuple[str, str, str], siblings: Sequence[tuple[str, str]]) -> Resource:
    module, entity, action = key
    resource = catalog.resource(module, entity)
    if resource is None:
        raise errors.NotFound(
            f"no entity {module}/{entity} is exposed over REST",
            code="SVC.ENTITY.NOT_FOUND",
        )
    if action not in resource.actions:
        allowed = [method for name, method in siblings if name in resource.actions]
        if not allowed:
            raise errors.NotFound(f"{resource.key} does not expose {action}", code="SVC.ACTION.NOT_EXPOSED")
        raise errors.MethodNotAllowed(
            f"{resource.key} does not expose {action}",
            code="SVC.ACTION.NOT_EXPOSED",
            allow=allowed,
        )
    return resource


def call(
    request: web.Request,
    workspace: Workspace,
    principal: auth.Principal,
    catalog: Catalog,
    resource: Resource,
) -> operations.Call:
    """The verb's context for ``workflows.operations``: this process's pool and cache, the request id."""
    app = request.app
    return operations.Call(
        app[state.POOL],
        app[state.CACHE],
        workspace,
        principal,
        catalog,
        resource,
        request.get(state.REQUEST_ID),
        app[state.EVENTS].local_wake(),
    )
