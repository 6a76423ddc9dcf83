"""``/ctx``: what the app process may ask of the server during an invoke.

Served by the bridge's own listener (loopback TCP or a unix socket, never the public address):
the scope and invoke ids are the only credentials, and they live as long as one invoke. A call
that echoes ``X-Svc-Scope-Id`` runs on the invoke's transaction, a write inside a savepoint so
that a refused statement (a decrement below zero) leaves the rest of the scope usable (reads take
none: they are parameterised selects, and one failing aborts the invoke, which then rolls back);
a call that echoes only ``X-Svc-Invoke-Id`` runs in a transaction of its own, committed at once.
Cache and lock calls act on their datastore at once in both cases: not part of the transaction.

Answers: 200 with the operation's JSON; errors are problem documents (400 bad body, 401 no scope,
403 refused scope or datastore permission, 404 unknown entity, record or datastore, 409
insufficient for a decrement, 422 invalid fields, 501 no backend connected).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dap import tracing
from dap.bridge import datastores, entities, scopes, wire
from dap.server import errors, state
from dap.server.storage import db

log = logging.getLogger(__name__)
BAD = entities.BAD


@dataclass
class Context:
    """What every /ctx handler reaches: the server app (pool, catalog), scopes and datastores."""

    server: web.Application
    scopes: scopes.Scopes
    datastores: datastores.Registry
    slugs: dict[Any, str]


CONTEXT: web.AppKey[Context] = web.AppKey("bridge_context")
Op = Callable[[Context, scopes.Scope, db.Connection, Mapping[str, Any]], Awaitable[Any]]


async def _entity_get(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
    resource = entities.resource_of(c.server[state.SPEC].current, body.get("named"))
    return {"data": await entities.get(conn, resource, s.tenant, entities.record_id(body))}


async def _entity_set(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
    resource = entities.resource_of(c.server[state.SPEC].current, body.get("named"))
    data = body.get("data", body.get("fields"))
    rid = entities.record_id(body)
    return {"data": await entities.set_(conn, resource, s.tenant, rid, data, owner=s.username)}


async def _entity_update(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
    resource = entities.resource_of(c.server[state.SPEC].current, body.get("named"))
    rid = entities.record_id(body)
    return {"data": await entities.update(conn, resource, s.tenant, rid, body.get("fields"))}


def _adder(sign: int) -> Op:
    async def op(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
        resource = entities.resource_of(c.server[state.SPEC].current, body.get("named"))
        return await entities.add(conn, resource, s.tenant, entities.record_id(body), body, sign=sign)

    return op


async def _db_query(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
    resource = entities.resource_of(c.server[state.SPEC].current, body.get("named"))
    return await entities.query(conn, resource, s.tenant, body)


async def _slug(c: Context, s: scopes.Scope, conn: db.Connection) -> str:
    slug = c.slugs.get(s.tenant)
    if slug is None:
        found = await conn.fetchval("SELECT slug FROM dap.workspaces WHERE id = $1", s.tenant)
        slug = c.slugs[s.tenant] = str(found or "")
    return slug


def _key(s: scopes.Scope, kind: str, body: Mapping[str, Any]) -> str:
    key = body.get("key")
    if not isinstance(key, str) or not key or len(key) > 512:
        raise errors.BadRequest("key must be a non-empty string (at most 512 characters)", code=BAD)
    return f"dap:{s.tenant}:{kind}:{key}"


def _ttl(body: Mapping[str, Any], *, required: bool) -> float | None:
    ttl = body.get("ttl_seconds")
    if ttl is None and not required:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= 86400:
        raise errors.BadRequest("ttl_seconds must be a number in (0, 86400]", code=BAD)
    return float(ttl)


def _store(kind: str, op: str, need: str) -> Op:
    async def handler(c: Context, s: scopes.Scope, conn: db.Connection, body: Mapping[str, Any]) -> Any:
        name = body.get("named")
        await c.datastores.follow(c.server[state.SPEC].current.datastores)  # the catalog may have swapped
        spec = c.datastores.spec(name, workspace=await _slug(c, s, conn))
        assert isinstance(name, str)
        c.datastores.check(name, spec, s.entity_scope, need)
        backend = await c.datastores.backend(name, spec)
        key = _key(s, kind, body)
        if op == "get":
            return {"value": await backend.get(key)}
        if op == "set":
            await backend.set(key, body.get("value"), _ttl(body, required=False))
            return {"ok": True}
        if op == "delete":
            return {"deleted": await backend.delete(key)}
        if op == "acquire":
            ttl = _ttl(body, required=True)
            assert ttl is not None
            token = await backend.acquire(key, ttl)
            return {"acquired": token is not None, "token": token}
        token = body.get("token")
        if not isinstance(token, int) or isinstance(token, bool):
            raise errors.BadRequest("token must be the fencing token acquire gave", code=BAD)
        return {"released": await backend.release(key, token)}

    return handler


OPS: dict[tuple[str, str], Op] = {
    ("entity", "get"): _entity_get,
    ("entity", "set"): _entity_set,
    ("entity", "update"): _entity_update,
    ("entity", "increment"): _adder(1),
    ("entity", "decrement"): _adder(-1),
    ("db", "query"): _db_query,
    ("cache", "get"): _store("cache", "get", "read"),
    ("cache", "set"): _store("cache", "set", "write"),
    ("cache", "delete"): _store("cache", "delete", "write"),
    ("lock", "acquire"): _store("lock", "acquire", "write"),
    ("lock", "release"): _store("lock", "release", "write"),
}
_PRIMITIVES = frozenset(p for p, _ in OPS)


async def _body(request: web.Request) -> Mapping[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError as exc:
        raise errors.BadRequest("the body is not JSON", code=BAD) from exc
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object", code=BAD)
    return body


async def handle(request: web.Request) -> web.Response:
    """One ``/ctx`` call; with tracing on, a span that continues the app's ``traceparent`` header
    (the invoke's span, as the app process received it, or a span of its own within it)."""
    if not tracing.enabled():
        return await _handle(request)
    name = f"ctx {request.match_info['primitive']}.{request.match_info['op']}"
    with tracing.span(name, kind="server", parent=request.headers.get(tracing.TRACEPARENT)) as span:
        response = await _handle(request)
        tracing.annotate(span, **{"http.response.status_code": response.status})
        tracing.failed(span, response.status)
        return response


async def _handle(request: web.Request) -> web.Response:
    try:
        primitive, name = request.match_info["primitive"], request.match_info["op"]
        op = OPS.get((primitive, name))
        if op is None:
            if primitive in _PRIMITIVES:
                raise errors.NotFound(f"/ctx/{primitive} has no operation {name!r}", code="SVC.CTX.NOT_FOUND")
            raise errors.NotImplementedHere(
                f"/ctx/{primitive} is not connected here (db, entity, cache and lock are)",
                code="SVC.CTX.BACKEND_NOT_CONNECTED",
            )
        c = request.app[CONTEXT]
        scope, joined = c.scopes.find(request.headers.get(wire.SCOPE), request.headers.get(wire.INVOKE))
        body = await _body(request)
        if joined:
            async with scope.lock:
                if not scope.live():
                    raise errors.Forbidden("scope refused: its invoke ended meanwhile", code=scopes.REFUSED)
                if scope.begin is not None:  # the invoke's transaction, begun at its first use
                    await scope.begin()
                if primitive == "entity" and name != "get":
                    async with scope.conn.transaction():  # a savepoint: a refused write keeps the scope
                        result = await op(c, scope, scope.conn, body)
                else:  # reads and datastore calls: no savepoint (two round trips saved)
                    result = await op(c, scope, scope.conn, body)
        else:
            async with db.connection(c.server[state.POOL]) as conn, db.committed(conn):
                result = await op(c, scope, conn, body)
        return web.json_response(result, dumps=_dumps)
    except errors.ApiError as exc:
        return errors.problem_response(exc)
    except db.UNREACHABLE:
        return errors.problem_response(
            errors.ServiceUnavailable("Postgres is unreachable", retry_after=1, code="SVC.DB.UNAVAILABLE")
        )


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


def build(context: Context, health: Callable[[], Mapping[str, Any]]) -> web.Application:
    app = web.Application(client_max_size=1024 * 1024)
    app[CONTEXT] = context

    async def healthz(_request: web.Request) -> web.Response:
        report = health()
        return web.json_response(report, status=200 if report.get("status") == "healthy" else 503)

    app.router.add_post("/ctx/{primitive}/{op}", handle)
    app.router.add_get("/health", healthz)
    return app
