"""Password resets at rest: single-use, expiring reset tokens of local users (``dap.password_resets``).

Only the SHA-256 of a token is stored; a new request replaces the user's earlier token, and
confirming takes the token with ``DELETE … RETURNING``, so a link works once and only until
``RESET_TTL``. ``mail_link`` is the whole of a reset request past its answer: find the user,
issue a token, mail the link (``mailer``); the HTTP side (``web.passwords``) answers first and
runs it afterwards, so nothing of it (an unknown user, a slow or refusing relay) shows in the
answer or its timing.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import uuid
from collections.abc import Callable

import asyncpg

from dap.server.access import mailer
from dap.server.storage import db

RESET_TTL = 3600  # seconds a reset link stays valid

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.password_resets (
    token_hash bytea PRIMARY KEY,
    tenant_id uuid NOT NULL,
    user_id uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    UNIQUE (tenant_id, user_id)
);
"""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def issue(conn: db.Connection, tenant: uuid.UUID, user: uuid.UUID, *, ttl: int = RESET_TTL) -> str:
    """A new reset token of ``user`` (any earlier one is void); expired tokens are swept."""
    token = secrets.token_urlsafe(32)
    await conn.execute("DELETE FROM dap.password_resets WHERE expires_at < now()")
    await conn.execute(
        """INSERT INTO dap.password_resets (token_hash, tenant_id, user_id, expires_at)
           VALUES ($1, $2, $3, now() + make_interval(secs => $4))
           ON CONFLICT (tenant_id, user_id) DO UPDATE
               SET token_hash = EXCLUDED.token_hash, expires_at = EXCLUDED.expires_at""",
        _digest(token),
        tenant,
        user,
        float(ttl),
    )
    return token


async def take(conn: db.Connection, tenant: uuid.UUID, token: str) -> uuid.UUID | None:
    """The user of ``token``, which is then gone; ``None`` when unknown, used or expired."""
    user: uuid.UUID | None = await conn.fetchval(
        """DELETE FROM dap.password_resets WHERE token_hash = $1 AND tenant_id = $2 AND expires_at > now()
           RETURNING user_id""",
        _digest(token),
        tenant,
    )
    return user


async def mail_link(
    pool: asyncpg.Pool,
    smtp: mailer.Smtp,
    *,
    tenant: uuid.UUID,
    username: str,
    link: Callable[[str], str],
    title: str,
) -> bool:
    """Mail ``username`` a reset link (``link(token)``) when the account exists and has an address.

    Whether it did is the result; a relay that cannot take the message raises
    ``ServiceUnavailable`` (``mailer.send``), after the token was issued (a mail that never came
    leaves a link nobody holds, which expires).
    """
    async with db.connection(pool) as conn:
        row = await conn.fetchrow(
            "SELECT id, email FROM dap.users WHERE tenant_id = $1 AND username = $2", tenant, username
        )
        if row is None or not row["email"]:
            return False
        async with db.committed(conn):
            token = await issue(conn, tenant, row["id"])
    message = mailer.reset_message(
        smtp, to=row["email"], username=username, link=link(token), title=title, minutes=RESET_TTL // 60
    )
    await asyncio.to_thread(mailer.send, smtp, message)
    return True
