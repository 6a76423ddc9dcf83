"""Password resets at rest: single-use, expiring reset tokens of local users (``dap.password_resets``).

Only the SHA-256 of a token is stored; a new request replaces the user's earlier token, and
confirming takes the token with ``DELETE … RETURNING``, so a link works once and only until
``RESET_TTL``. Sending the mail is ``mailer``'s job, the HTTP side ``web.passwords``'.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

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
