"""Local users' passwords: change (signed in) and reset by a single-use link sent by mail.

``POST /{ws}/_ui/password`` ``{"current_password", "new_password"}`` with the caller's local token
changes their password (403 when the current one is wrong; 409 for a provider's user, whose
password lives at the provider). ``POST /{ws}/_ui/password-reset`` ``{"username"}`` mails a link
``{DAP_PUBLIC_URL}/{ws}/#/reset?token=…`` to the user's address and answers 202 whether or not
the user exists or has an address, so the answer tells nobody who has an account; it is
rate-limited like login. The answer comes first and the rest (finding the user, issuing the
token, the mail: ``resets.mail_link``) runs after it in a task of the application, so neither the
answer nor its timing depends on the account or on the relay; a relay that refuses or fails is
logged (warning, with the relay's address and error), never shown. A graceful stop waits for
mails in flight (``DRAIN`` seconds at most) before the pool closes. The link's host is
``DAP_PUBLIC_URL``, never the request's ``Host`` header, which a caller could point at their own
server to collect someone else's token. ``POST
/{ws}/_ui/password-reset/confirm`` ``{"token", "new_password"}`` takes the token once (403 when
unknown, used or expired) and sets the password. Tokens already issued for the user stay valid
until they expire: local tokens are not revocable (``access.auth``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from dap.server import errors, identity, state
from dap.server.access import accounts, auth, mailer, resets, throttling
from dap.server.storage import db
from dap.server.storage.workspaces import Workspace
from dap.server.web import requests, users

UNAVAILABLE = "SVC.AUTH.RESET_UNAVAILABLE"
DRAIN = 15.0  # seconds a graceful stop waits for reset mails in flight (a relay's timeout is 10 s)
PENDING: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("reset_mails", set)

log = logging.getLogger(__name__)


async def _workspace(request: web.Request) -> Workspace:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    return workspace


def _strings(body: dict[str, Any], *names: str) -> list[str]:
    problems = [errors.FieldProblem(k, "unknown field") for k in body if k not in names]
    values: list[str] = []
    for name in names:
        value = body.get(name)
        if not isinstance(value, str) or not value:
            problems.append(errors.FieldProblem(name, "required: a string"))
        elif name == "new_password" and len(value) < users.MIN_PASSWORD:
            problems.append(errors.FieldProblem(name, f"at least {users.MIN_PASSWORD} characters"))
        values.append(value if isinstance(value, str) else "")
    if problems:
        raise errors.ValidationFailed("invalid password payload", errors=problems)
    return values


async def change(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    token = auth.bearer_token(request.headers.get("Authorization"))
    principal = await identity.authenticate(request.app, token, workspace=workspace.slug)
    current, new = _strings(await requests.read_json(request), "current_password", "new_password")
    try:
        user_id = uuid.UUID(principal.sub)
    except ValueError:
        user_id = None
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:
        await throttling.check(
            conn, throttling.LOGIN_PER_USERNAME, f"{workspace.tenant_id}:{principal.username}"
        )
        stored = (
            None
            if user_id is None
            else await conn.fetchval(
                "SELECT password_hash FROM dap.users WHERE tenant_id = $1 AND id = $2",
                workspace.tenant_id,
                user_id,
            )
        )
    if stored is None:
        raise errors.Conflict(
            "this account has no password here: it signs in through an identity provider or external tokens",
            code="SVC.AUTH.NO_LOCAL_PASSWORD",
        )
    if not await asyncio.to_thread(accounts.check_password, current, stored):
        raise errors.Forbidden("the current password is wrong", code="SVC.AUTH.BAD_CREDENTIALS")
    hashed = await asyncio.to_thread(accounts.hash_password, new)
    async with db.connection(pool) as conn, db.committed(conn):
        await conn.execute(
            "UPDATE dap.users SET password_hash = $3 WHERE tenant_id = $1 AND id = $2",
            workspace.tenant_id,
            user_id,
            hashed,
        )
    return web.json_response({"data": {"changed": True}})


def _public_url() -> str:
    url = os.environ.get("DAP_PUBLIC_URL", "").rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise errors.NotImplementedHere(
            "password reset needs DAP_PUBLIC_URL (the UI's address, for the link) and DAP_SMTP_HOST",
            code=UNAVAILABLE,
        )
    return url


async def request_reset(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    smtp = mailer.from_env(os.environ)
    public = _public_url()
    if smtp is None:
        raise errors.NotImplementedHere(
            "password reset needs DAP_SMTP_HOST (no mail relay)", code=UNAVAILABLE
        )
    (username,) = _strings(await requests.read_json(request), "username")
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:
        await throttling.check(conn, throttling.LOGIN_PER_ADDRESS, request.remote or "unknown")
        await throttling.check(conn, throttling.LOGIN_PER_USERNAME, f"{workspace.tenant_id}:{username}")
    spec = request.app[state.SPEC].current.workspaces.get(workspace.slug)
    title = (spec.title if spec is not None else None) or workspace.slug
    mailing = resets.mail_link(
        pool,
        smtp,
        tenant=workspace.tenant_id,
        username=username,
        link=lambda token: f"{public}/{workspace.slug}/#/reset?token={token}",
        title=title,
    )
    _after_answer(request.app, _logged(mailing, workspace=workspace.slug, username=username))
    answer = {"detail": "if the account has an e-mail address, a reset link is on its way"}
    return web.json_response({"data": answer}, status=202)


async def _logged(mailing: Coroutine[Any, Any, bool], *, workspace: str, username: str) -> None:
    """Run ``mailing``; what fails is logged for the operator, since no caller waits for it."""
    ctx = {"workspace": workspace, "username": username}
    try:
        await mailing
    except errors.ServiceUnavailable as exc:  # the relay: unreachable, refusing, timing out
        log.warning("password reset mail not sent: %s", exc, extra={"ctx": ctx})
    except Exception:
        log.exception("password reset mail not sent", extra={"ctx": ctx})


def _after_answer(app: web.Application, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` after the answer, held by the application so a stop can wait for it."""
    task = asyncio.create_task(work, name="dap-password-reset-mail")
    pending = app[PENDING]
    pending.add(task)
    task.add_done_callback(pending.discard)


async def _drain(app: web.Application) -> None:
    """Let mails in flight finish before the pool closes (``on_shutdown`` runs before cleanup)."""
    current: set[asyncio.Task[None]] = app[PENDING]
    pending = set(current)  # a copy: finished tasks leave the application's set meanwhile
    if pending:
        _done, late = await asyncio.wait(pending, timeout=DRAIN)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d password reset mail(s) still sending at stop: abandoned", len(late))


async def confirm_reset(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    token, new = _strings(await requests.read_json(request), "token", "new_password")
    hashed = await asyncio.to_thread(accounts.hash_password, new)
    async with db.connection(request.app[state.POOL]) as conn:
        await throttling.check(conn, throttling.LOGIN_PER_ADDRESS, request.remote or "unknown")
        async with db.committed(conn):
            user = await resets.take(conn, workspace.tenant_id, token)
            if user is not None:
                username = await conn.fetchval(
                    "UPDATE dap.users SET password_hash = $3 WHERE tenant_id = $1 AND id = $2 "
                    "RETURNING username",
                    workspace.tenant_id,
                    user,
                    hashed,
                )
    if user is None:
        raise errors.Forbidden(
            "this reset link is unknown, used already or expired: ask for a new one",
            code="SVC.AUTH.RESET_INVALID",
        )
    return web.json_response({"data": {"username": username}})


def add_routes(app: web.Application) -> None:
    pending: set[asyncio.Task[None]] = set()
    app[PENDING] = pending
    app.on_shutdown.append(_drain)
    app.router.add_post("/{ws}/_ui/password", change)
    app.router.add_post("/{ws}/_ui/password-reset", request_reset)
    app.router.add_post("/{ws}/_ui/password-reset/confirm", confirm_reset)
