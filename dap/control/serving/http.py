"""HTTP plumbing shared by the handlers: typed app keys, problem documents, JSON helpers.

Every error leaves as an RFC 9457 problem document (``application/problem+json``) built from a
``errors.ControlError``; aiohttp's own HTTP errors (unknown route, wrong method, body too large)
are mapped into the same shape, and anything unexpected becomes a 500 that carries a request id
and no internals (the traceback goes to the log under the same id). Query and path parameters
are checked once, for every route, by ``parameters`` before a handler sees them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
from aiohttp import web

from dap.control import errors
from dap.control.clusters import live
from dap.control.ids import KeyId
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.supply import contents, transparency
from dap.control.trust import signing

log = logging.getLogger(__name__)


class Agent(Protocol):
    """The cluster-mode sync and relay agent, as the health handler sees it."""

    def status(self) -> dict[str, Any]: ...


POOL: web.AppKey[store.Pool] = web.AppKey("pool")
SETTINGS = web.AppKey("settings", settings.Settings)
LIVE = web.AppKey("live", live.Live)
SIGNER = web.AppKey("signer", signing.Signer)
TRUSTED: web.AppKey[dict[KeyId, bytes]] = web.AppKey("trusted")
AGENT: web.AppKey[Agent] = web.AppKey("agent")

PROBLEM_TYPE = "application/problem+json"

_AIOHTTP_CODES = {
    404: ("SVC.CONTROL.NOT_FOUND", "Not found"),
    405: ("SVC.REQUEST.METHOD_NOT_ALLOWED", "Method not allowed"),
    413: ("SVC.ARTIFACT.TOO_LARGE", "Payload too large"),
}


def problem(
    status: int, code: str, title: str, detail: str, items: list[errors.ErrorItem] | None = None, **extra: Any
) -> web.Response:
    body: dict[str, Any] = {
        "type": f"urn:dap:error:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "errors": [item.as_json() for item in items or []],
        **extra,
    }
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=PROBLEM_TYPE)


def from_error(exc: errors.ControlError) -> web.Response:
    return problem(exc.status, exc.code, exc.title, exc.detail, exc.errors)


@web.middleware
async def problems(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError) as exc:
        log.warning("store unreachable: %r", exc, extra={"ctx": {"path": request.path}})
        return from_error(errors.StoreUnavailableError("the control database is unreachable; retry shortly"))
    except errors.ControlError as exc:
        if exc.status >= 500:
            log.warning("request failed: %s", exc.detail, extra={"ctx": {"path": request.path}})
        return from_error(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code, title = _AIOHTTP_CODES.get(exc.status, ("SVC.REQUEST.MALFORMED", exc.reason))
        return problem(exc.status, code, title, exc.text or exc.reason)
    except Exception:
        request_id = uuid.uuid4().hex
        log.exception("unhandled error", extra={"ctx": {"request_id": request_id, "path": request.path}})
        return problem(
            500,
            "SVC.CONTROL.INTERNAL",
            "Internal control-plane error",
            f"the control plane failed; quote request id {request_id}",
            request_id=request_id,
        )


# what no parameter of the control may carry: NUL, which Postgres text cannot hold (asyncpg fails
# the statement), and the other C0 controls and DEL, which no id, name or timestamp contains
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def parameter_problems(pairs: Iterable[tuple[str, str]]) -> list[errors.ErrorItem]:
    """The parameters (name, value) that carry a character no parameter may carry (pure)."""
    return [
        errors.ErrorItem(name, "must not contain control characters (NUL, U+0001-U+001F, DEL)")
        for name, value in pairs
        if _CONTROL_CHARACTERS.search(name) or _CONTROL_CHARACTERS.search(value)
    ]


@web.middleware
async def parameters(request: web.Request, handler: Any) -> web.StreamResponse:
    """Refuse a bad query or path parameter before any handler runs, so that no handler (and no
    statement) ever sees one: the one place every route's parameters are checked."""
    pairs = [*request.query.items(), *request.match_info.items()]
    wrong = parameter_problems(pairs)
    if wrong:
        names = ", ".join(sorted({item.path for item in wrong}))
        raise errors.RequestError(f"invalid parameter {names}: control characters are not allowed", wrong)
    response: web.StreamResponse = await handler(request)
    return response


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(data).encode(), content_type="application/json")


def nul_paths(value: Any, path: str = "") -> list[str]:
    """The JSON paths (``records[0].pod``) of the strings and keys in ``value`` that hold NUL,
    which neither Postgres text nor jsonb can store (pure)."""
    if isinstance(value, str):
        return [path] if "\x00" in value else []
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in nul_paths(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        found: list[str] = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if "\x00" in key:
                found.append(where.replace("\x00", "\\u0000"))
            else:
                found += nul_paths(item, where)
        return found
    return []


async def json_body(request: web.Request) -> Any:
    """The request's JSON; 400 when it is not JSON or holds a NUL anywhere (every body the control
    stores passes here, so none reaches Postgres with one)."""
    try:
        body = json.loads(await request.read())
    except web.HTTPRequestEntityTooLarge as exc:
        raise errors.PayloadTooLargeError(f"the request body exceeds the limit ({exc.text})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.RequestError(f"request body is not JSON: {exc}") from exc
    wrong = nul_paths(body)
    if wrong:
        raise errors.RequestError(
            f"the body holds NUL (\\u0000), which cannot be stored: {', '.join(wrong[:5])}",
            [errors.ErrorItem(p, "must not contain NUL (\\u0000)") for p in wrong],
        )
    return body


def parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise errors.RequestError(f"the {what} is not JSON: {exc}") from exc


async def reload_state(app: web.Application) -> None:
    """Reload the desired state from Postgres into ``Live`` (region and standalone).

    Also signs the log's head when another process appended without the key (``revoke``).
    """
    if SIGNER in app:
        await transparency.ensure_head(app[POOL], app[SIGNER])
    version, deployments = await contents.snapshot_content(app[POOL], environment=app[SETTINGS].environment)
    current = app[LIVE].state
    if version < current.version:
        return  # a reload that read earlier finished later: the snapshot never goes back
    if version == current.version and tuple(deployments) == current.deployments:
        return
    app[LIVE].replace(
        dataclasses.replace(
            current,
            version=version,
            deployments=tuple(deployments),
            issued_at=datetime.now(UTC).replace(microsecond=0),
            bodies={},
        )
    )
