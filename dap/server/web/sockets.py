"""``GET /{ws}/_ws``: the websocket of delivered events (docs/events.md has the framing).

The token comes as ``Authorization: Bearer …`` or ``?access_token=`` (browsers cannot set
headers on a websocket). Text frames of JSON, client to server::

    {"type": "subscribe", "id": "s1", "entity": "shop/order",
     "record": "<uuid>"?, "scope": "workspace"|"user"?, "after": 41?}
    {"type": "unsubscribe", "id": "s1"}
    {"type": "ping"}
    {"type": "call", "id": "c1", "entity": "shop/order", "verb": "find", …}   (``socket_calls``)

server to client: ``welcome`` (``position``: the feed's last ``seq``), ``subscribed``,
``unsubscribed``, ``pong``, ``error`` (``code``, ``detail``) and ``event`` (``seq``,
``subscription``, ``event``). Each event passes the caller's find permission on the entity, its
row scope (judged on the event's record) and field permissions (hidden fields removed) before it
is sent; ``scope: user`` narrows to records the caller owns. ``after`` resumes: every matching
event with a larger ``seq`` is sent first, then live ones, with no gap and no repeat. Pings every
``HEARTBEAT`` seconds keep the connection alive; a client whose queue of unsent events passes
``LIMIT`` is closed with code 4008 (it reconnects and resumes), never buffered without bound.
A socket is closed with code 4001 when the token it connected with expires (its ``exp``): the
client reconnects with a fresh token and resumes with ``after``.

A frame the server cannot use never costs the client its socket: JSON nested deeper than
``requests.MAX_JSON_DEPTH`` (parsed without recursing past it), an ``after`` beyond a Postgres
``bigint``, or any failure while answering one frame is answered with an ``error`` frame and the
socket goes on (the failure is logged with the socket's request id).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt
from aiohttp import WSMsgType, web

from dap.server import errors, identity, state
from dap.server.access import auth, guards
from dap.server.catalog import Resource
from dap.server.events import channels, feed
from dap.server.storage import db
from dap.server.web import requests, socket_calls
from dap.server.workflows import watching

log = logging.getLogger(__name__)
HEARTBEAT = 20.0
LIMIT = 256  # events queued for one client before it is dropped
BACKLOG = 10_000  # events a resume may ask for
SLOW = 4008
EXPIRED = 4001  # the token's exp passed: reconnect with a fresh token, resume with after
MAX_SEQ = 2**63 - 1  # seq is a Postgres bigint: a larger after names no event, ever
SOCKETS: web.AppKey[set[web.WebSocketResponse]] = web.AppKey("sockets", set)


@dataclass
class Subscription:
    id: str
    resource: Resource
    access: guards.Access
    record: str | None
    mine: bool  # scope: user
    cursor: int = 0

    def shows(self, event: channels.Event) -> dict[str, Any] | None:
        """The event as this subscription may see it, or ``None`` (pure; ``workflows.watching``,
        which gRPC's Watch shares)."""
        return watching.Watch(self.resource, self.access, self.record, self.mine).shows(event)


async def _principal(request: web.Request, slug: str) -> tuple[auth.Principal, float]:
    """The verified caller and when its token expires (epoch seconds)."""
    header = request.headers.get("Authorization")
    token = auth.bearer_token(header) if header else request.query.get("access_token", "")
    if not token:
        raise errors.Unauthorized("the websocket needs a token: 'Authorization: Bearer …' or ?access_token=")
    principal = await identity.authenticate(request.app, token, workspace=slug, bind=True)
    return principal, expires(token)


def expires(token: str) -> float:
    """The ``exp`` of a token the verifier has already accepted (its signature and the claim's
    type were checked there; this only reads it back)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return float(claims["exp"])


async def _expire(ws: web.WebSocketResponse, at: float) -> None:
    """Close ``ws`` with :data:`EXPIRED` when its token's ``exp`` (``at``) passes."""
    await asyncio.sleep(max(0.0, at - time.time()))
    await ws.close(code=EXPIRED, message=b"token expired: reconnect with a fresh token and resume with after")


async def handler(request: web.Request) -> web.WebSocketResponse:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    principal, exp = await _principal(request, workspace.slug)  # 401 before the upgrade
    ws = web.WebSocketResponse(heartbeat=HEARTBEAT)
    await ws.prepare(request)
    hub: feed.Feed = request.app[state.EVENTS].feed
    subscriptions: dict[str, Subscription] = {}
    lock = asyncio.Lock()

    def wants(event: channels.Event) -> bool:
        return event.tenant == workspace.tenant_id and any(
            s.resource.key == event.entity for s in subscriptions.values()
        )

    subscriber = hub.subscribe(feed.Subscriber(wants, limit=LIMIT))
    request.app[SOCKETS].add(ws)
    writer = asyncio.create_task(_write(ws, subscriber, subscriptions, lock))
    expiry = asyncio.create_task(_expire(ws, exp))
    await ws.send_json({"type": "welcome", "position": hub.position})
    try:
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            frame, refusal = parse(msg.data)
            if frame is None:
                await ws.send_json({"type": "error", "code": "SVC.WS.FRAME", "detail": refusal})
                continue
            async with lock:
                try:
                    await _frame(request, ws, frame, principal, workspace.tenant_id, subscriptions)
                except ConnectionResetError:
                    raise
                except Exception:  # one bad frame must not cost the client its socket
                    request_id = request.get(state.REQUEST_ID)
                    log.exception("websocket frame failed", extra={"ctx": {"request_id": request_id}})
                    if not ws.closed:
                        await ws.send_json(
                            {
                                "type": "error",
                                "id": frame.get("id"),  # as sent, as every answer to a call
                                "code": errors.InternalError.default_code,
                                "detail": f"internal error; quote request id {request_id}",
                            }
                        )
    finally:
        for task in (writer, expiry):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        hub.unsubscribe(subscriber)
        request.app[SOCKETS].discard(ws)
    return ws


async def _write(
    ws: web.WebSocketResponse,
    subscriber: feed.Subscriber,
    subscriptions: dict[str, Subscription],
    lock: asyncio.Lock,
) -> None:
    while not ws.closed:
        if subscriber.dropped:
            await ws.close(code=SLOW, message=b"too slow: reconnect and resume with after")
            return
        try:
            seq, event = await asyncio.wait_for(subscriber.queue.get(), 1.0)
        except TimeoutError:
            continue
        try:
            async with lock:
                for s in list(subscriptions.values()):
                    await _send(ws, s, seq, event)
        except (ConnectionResetError, RuntimeError):  # the client went away mid-send
            await ws.close()
            return


async def _send(ws: web.WebSocketResponse, s: Subscription, seq: int, event: channels.Event) -> None:
    if seq <= s.cursor:
        return
    shown = s.shows(event)
    s.cursor = seq
    if shown is not None:
        await ws.send_json({"type": "event", "seq": seq, "subscription": s.id, "event": shown}, dumps=_dumps)


def parse(text: str) -> tuple[dict[str, Any] | None, str]:
    """A client frame as a JSON object, or ``None`` and why not (pure; never recurses without bound)."""
    try:
        frame = json.loads(text)
    except ValueError:
        return None, "send JSON objects"
    except RecursionError:
        frame = None
        too_deep = True
    else:
        too_deep = requests.too_deep(frame, requests.MAX_JSON_DEPTH)
    if too_deep:
        return None, f"the frame nests objects and arrays deeper than {requests.MAX_JSON_DEPTH} levels"
    if not isinstance(frame, dict):
        return None, "send JSON objects"
    return frame, ""


def _dumps(data: Any) -> str:
    return json.dumps(data, default=db.json_default)


async def _frame(
    request: web.Request,
    ws: web.WebSocketResponse,
    frame: dict[str, Any],
    principal: auth.Principal,
    tenant: uuid.UUID,
    subscriptions: dict[str, Subscription],
) -> None:
    kind, sid = frame.get("type"), str(frame.get("id", ""))
    if kind == "ping":
        await ws.send_json({"type": "pong"})
        return
    if kind == "call":  # a verb as a request/response frame (``socket_calls``)
        await socket_calls.answer(request, ws, frame, principal)
        return
    if kind == "unsubscribe":
        subscriptions.pop(sid, None)
        await ws.send_json({"type": "unsubscribed", "id": sid})
        return
    if kind != "subscribe" or not sid:
        await ws.send_json({"type": "error", "id": sid, "code": "SVC.WS.FRAME", "detail": "unknown frame"})
        return
    catalog = request.app[state.SPEC].current
    module, _, name = str(frame.get("entity", "")).partition("/")
    resource = catalog.resource(module, name)
    try:
        if resource is None:
            raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
        access = guards.check(principal, resource, "find")
        record = frame.get("record")
        if record is not None:
            record = str(uuid.UUID(str(record)))
        after = frame.get("after")
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_SEQ
        ):
            raise errors.ValidationFailed(
                f"after is the seq of the last event received (an integer from 0 to {MAX_SEQ})"
            )
    except errors.ApiError as exc:
        await ws.send_json({"type": "error", "id": sid, "code": exc.code, "detail": exc.detail})
        return
    except ValueError:
        await ws.send_json({"type": "error", "id": sid, "code": "SVC.WS.FRAME", "detail": "record is a uuid"})
        return
    hub: feed.Feed = request.app[state.EVENTS].feed
    s = Subscription(sid, resource, access, record, frame.get("scope") == "user", cursor=hub.position)
    subscriptions[sid] = s
    await ws.send_json({"type": "subscribed", "id": sid, "position": hub.position})
    if after is None:
        return
    s.cursor = after  # resume: what the client missed, then the live events (held back by the lock)
    sent = 0
    async with db.connection(request.app[state.POOL]) as conn:
        while sent < BACKLOG:
            page = await feed.since(conn, s.cursor)
            for seq, event in page:
                if event.tenant == tenant:
                    await _send(ws, s, seq, event)
                s.cursor = max(s.cursor, seq)
            sent += len(page)
            if len(page) < feed.PAGE:
                break


async def close_all(app: web.Application) -> None:
    """Close the open websockets (at shutdown, before in-flight handlers are awaited)."""
    open_now: set[web.WebSocketResponse] = app[SOCKETS]
    for ws in tuple(open_now):
        with contextlib.suppress(Exception):
            await ws.close()
