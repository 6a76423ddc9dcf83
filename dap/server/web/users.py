"""Workspace users: the first-admin setup and password login of the UI.

``POST /{ws}/_ui/setup`` creates the first admin with the workspace's one-time ``setup_code``
(``accounts``; 403 when wrong, used or expired) while the workspace has no user (409
``ALREADY_DONE``) and no data (409 ``CLOSED``, and the code is void: a workspace used with external
tokens is never handed to whoever calls first); an advisory lock per tenant makes two concurrent
setups produce one admin. Setup is rate-limited per address, login per address and per username
(``throttling``, 429 with ``Retry-After``). ``POST
/{ws}/_ui/login`` checks a password and issues an HS256 token (501 where the server only holds a
public key). Storage and hashing are in ``accounts``; hashing runs off the event loop because
scrypt is deliberately slow.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.access import accounts, throttling
from dap.server.storage import db, workspaces
from dap.server.web import requests

USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
MIN_PASSWORD = 8
SETUP_CODE_HINT = (
    "the admin listener returns one when the workspace is registered, and a new one on "
    "POST /workspaces/{slug}/setup-code (dap dev prints it)"
)


def _credentials(body: dict[str, Any], *, with_email: bool) -> tuple[str, str, str | None]:
    problems: list[errors.FieldProblem] = []
    username, password, email = body.get("username"), body.get("password"), body.get("email")
    allowed = {"username", "password", "email"} if with_email else {"username", "password"}
    problems += [errors.FieldProblem(k, "unknown field") for k in body if k not in allowed]
    if not isinstance(username, str) or not USERNAME.fullmatch(username):
        problems.append(errors.FieldProblem("username", "1-128 characters: letters, digits, _ . @ -"))
    if not isinstance(password, str) or (with_email and len(password) < MIN_PASSWORD):
        problems.append(errors.FieldProblem("password", f"a string of at least {MIN_PASSWORD} characters"))
    if with_email and email is not None and (not isinstance(email, str) or "@" not in email):
        problems.append(errors.FieldProblem("email", "an e-mail address"))
    if problems:
        raise errors.ValidationFailed("invalid credentials payload", errors=problems)
    assert isinstance(username, str)
    assert isinstance(password, str)
    return username, password, email if isinstance(email, str) else None


async def setup(request: web.Request) -> web.Response:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    pool = request.app[state.POOL]
    async with db.connection(pool) as conn:
        await throttling.check(conn, throttling.SETUP_PER_ADDRESS, request.remote or "unknown")
        await throttling.check(conn, throttling.SETUP_PER_WORKSPACE, str(workspace.tenant_id))
    body = await requests.read_json(request)
    code = body.pop("setup_code", None)
    username, password, email = _credentials(body, with_email=True)
    if not isinstance(code, str) or not code:
        raise errors.ValidationFailed(
            "the first-admin setup needs the workspace's one-time setup code",
            errors=[errors.FieldProblem("setup_code", f"required: {SETUP_CODE_HINT}")],
        )
    hashed = await asyncio.to_thread(accounts.hash_password, password)
    tenant = workspace.tenant_id
    tables = [t.name for t in request.app[state.SPEC].current.tables if t.kind == "entity"]
    async with db.connection(pool) as conn, db.committed(conn):
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1::text))", str(tenant))
        if await accounts.has_users(conn, tenant):
            raise errors.Conflict(
                "this workspace already has users; setup is only for the first admin",
                code="SVC.SETUP.ALREADY_DONE",
            )
        if await workspaces.has_rows(conn, tables, tenant):
            await accounts.close_setup(conn, tenant)
            raise errors.Conflict(
                "this workspace already holds data, so its first admin cannot be claimed over HTTP; "
                "create users through your identity provider's tokens",
                code="SVC.SETUP.CLOSED",
            )
        if not await accounts.take_setup_code(conn, tenant, code):
            raise errors.Forbidden(
                f"the setup code is wrong, used or expired; {SETUP_CODE_HINT}", code="SVC.SETUP.CODE_INVALID"
            )
        user_id: uuid.UUID = await conn.fetchval(
            """INSERT INTO dap.users (tenant_id, username, email, password_hash, roles)
               VALUES ($1, $2, $3, $4, $5) RETURNING id""",
            tenant,
            username,
            email,
            hashed,
            ["admin"],
        )
    data: dict[str, Any] = {"id": str(user_id), "username": username, "email": email, "roles": ["admin"]}
    verifier = request.app[state.VERIFIER]
    if verifier.can_issue:
        data["token"] = verifier.issue(
            sub=str(user_id), username=username, roles=["admin"], workspace=workspace.slug
        )
    return web.json_response({"data": data}, status=201)


async def login(request: web.Request) -> web.Response:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    verifier = request.app[state.VERIFIER]
    if not verifier.can_issue:
        raise errors.NotImplementedHere(
            "this server verifies tokens with a public key; obtain tokens from your identity provider",
            code="SVC.AUTH.LOGIN_UNAVAILABLE",
        )
    username, password, _ = _credentials(await requests.read_json(request), with_email=False)
    async with db.connection(request.app[state.POOL]) as conn:
        await throttling.check(conn, throttling.LOGIN_PER_ADDRESS, request.remote or "unknown")
        await throttling.check(conn, throttling.LOGIN_PER_USERNAME, f"{workspace.tenant_id}:{username}")
        row = await conn.fetchrow(
            "SELECT id, password_hash, roles FROM dap.users WHERE tenant_id = $1 AND username = $2",
            workspace.tenant_id,
            username,
        )
    stored = row["password_hash"] if row is not None else accounts.dummy_hash()
    ok = await asyncio.to_thread(accounts.check_password, password, stored)
    if row is None or not ok:
        raise errors.Unauthorized("unknown username or wrong password", code="SVC.AUTH.BAD_CREDENTIALS")
    token = verifier.issue(
        sub=str(row["id"]), username=username, roles=list(row["roles"]), workspace=workspace.slug
    )
    return web.json_response({"token": token, "token_type": "Bearer", "expires_in": 3600})
