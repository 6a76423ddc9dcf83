"""Workspace users: the first-admin setup and password login of the UI.

``POST /{ws}/_ui/setup`` creates the first admin while the workspace has no user (409 after);
an advisory lock per tenant makes two concurrent setups produce one admin. ``POST
/{ws}/_ui/login`` checks a password and issues an HS256 token (501 where the server only holds a
public key). Storage and hashing are in ``accounts``; hashing runs off the event loop because
scrypt is deliberately slow.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

from aiohttp import web

from dap.server import errors, state
from dap.server.access import accounts

USERNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
MIN_PASSWORD = 8


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest("the body is not valid JSON", code="SVC.REQUEST.MALFORMED_JSON") from exc
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object", code="SVC.REQUEST.MALFORMED_JSON")
    return body


def _credentials(body: dict[str, Any], *, with_email: bool) -> tuple[str, str, str | None]:
    problems: list[errors.FieldProblem] = []
    username, password, email = body.get("username"), body.get("password"), body.get("email")
    allowed = {"username", "password", "email"} if with_email else {"username", "password"}
    problems += [errors.FieldProblem(k, "unknown field") for k in body if k not in allowed]
    if not isinstance(username, str) or not USERNAME.match(username):
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
    username, password, email = _credentials(await _json_body(request), with_email=True)
    hashed = await asyncio.to_thread(accounts.hash_password, password)
    tenant = workspace.tenant_id
    async with request.app[state.POOL].acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1::text))", str(tenant))
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM dap.users WHERE tenant_id = $1)", tenant):
            raise errors.Conflict(
                "this workspace already has users; setup is only for the first admin",
                code="SVC.SETUP.ALREADY_DONE",
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
    username, password, _ = _credentials(await _json_body(request), with_email=False)
    async with request.app[state.POOL].acquire() as conn:
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
