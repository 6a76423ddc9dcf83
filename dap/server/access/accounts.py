"""Workspace users at rest: the ``dap.users`` table, password hashing, first-admin setup codes.

Kept apart from the HTTP handlers (``users``) so that the boot path, which creates the platform
tables, does not import the web stack. Passwords are hashed with the standard library's scrypt
(N=2^14, r=8, p=1, 16-byte salt), stored as ``scrypt$N$r$p$salt$hash`` and compared in constant
time; unknown usernames are checked against a dummy hash so they take as long as known ones.

The first admin of a workspace is created with a one-time setup code (``dap.setup_codes``): the
admin listener hands one out when the workspace is registered (or on request), only its SHA-256
is stored, it expires after a day and is deleted by the setup that uses it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import uuid
from dataclasses import dataclass

from dap.server.storage import db

N, R, P, DKLEN = 2**14, 8, 1, 32

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.users (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    username text NOT NULL,
    email text,
    password_hash text NOT NULL,
    roles text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, username)
);
CREATE TABLE IF NOT EXISTS dap.setup_codes (
    tenant_id uuid PRIMARY KEY,
    code_hash bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
"""
SETUP_CODE_TTL = 24 * 3600  # seconds a setup code stays valid


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, dklen=DKLEN)
    b64 = base64.b64encode
    return f"scrypt${N}${R}${P}${b64(salt).decode()}${b64(digest).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=len(expected)
        )
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


_DUMMY: list[str] = []  # computed on first use: scrypt is slow on purpose, imports should not be


def dummy_hash() -> str:
    """A hash to check unknown usernames against, so they take as long as known ones."""
    if not _DUMMY:
        _DUMMY.append(hash_password("not a password", salt=b"\x00" * 16))
    return _DUMMY[0]


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


@dataclass(frozen=True)
class Account:
    """A password account as its requests know it."""

    id: uuid.UUID
    username: str
    roles: tuple[str, ...]

    @property
    def sub(self) -> str:
        """The principal id of the account's requests: ``/_ui/login`` issues it as the token's
        ``sub``, so whatever is stored per principal (a vote, an owner) names the account by it."""
        return str(self.id)


async def find(conn: db.Connection, tenant: uuid.UUID, username: str) -> Account | None:
    found = await conn.fetchrow(
        "SELECT id, roles FROM dap.users WHERE tenant_id = $1 AND username = $2", tenant, username
    )
    return None if found is None else Account(found["id"], username, tuple(found["roles"]))


# --- the one-time code of the first-admin setup -------------------------------------------------


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode()).digest()


async def has_users(conn: db.Connection, tenant: uuid.UUID) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM dap.users WHERE tenant_id = $1)", tenant))


async def issue_setup_code(conn: db.Connection, tenant: uuid.UUID, *, ttl: int = SETUP_CODE_TTL) -> str:
    """A new setup code for ``tenant``, replacing any earlier one; only its digest is stored."""
    code = secrets.token_urlsafe(18)
    await conn.execute(
        """INSERT INTO dap.setup_codes (tenant_id, code_hash, expires_at)
           VALUES ($1, $2, now() + make_interval(secs => $3))
           ON CONFLICT (tenant_id) DO UPDATE
               SET code_hash = EXCLUDED.code_hash, expires_at = EXCLUDED.expires_at""",
        tenant,
        _digest(code),
        float(ttl),
    )
    return code


async def take_setup_code(conn: db.Connection, tenant: uuid.UUID, code: str) -> bool:
    """Use up ``code``: true when it is ``tenant``'s valid code, which is then gone for good."""
    taken = await conn.fetchval(
        "DELETE FROM dap.setup_codes WHERE tenant_id = $1 AND code_hash = $2 AND expires_at > now() "
        "RETURNING 1",
        tenant,
        _digest(code),
    )
    return taken is not None


async def close_setup(conn: db.Connection, tenant: uuid.UUID) -> None:
    """No setup code of ``tenant`` works any more."""
    await conn.execute("DELETE FROM dap.setup_codes WHERE tenant_id = $1", tenant)
