"""Workspace users at rest: the ``dap.users`` table and password hashing.

Kept apart from the HTTP handlers (``users``) so that the boot path, which creates the platform
tables, does not import the web stack. Passwords are hashed with the standard library's scrypt
(N=2^14, r=8, p=1, 16-byte salt), stored as ``scrypt$N$r$p$salt$hash`` and compared in constant
time; unknown usernames are checked against a dummy hash so they take as long as known ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

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
"""


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
    await conn.execute(DDL)
