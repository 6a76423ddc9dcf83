"""Provider sign-ins at rest: pending authorization requests and signed-in browser sessions.

A pending request (``dap.oidc_flows``) holds the ``nonce`` and PKCE verifier of one
authorization request under the SHA-256 of its ``state``; the callback takes it with ``DELETE …
RETURNING``, so a ``state`` works once and a replayed callback finds nothing. Requests expire
after ``FLOW_TTL``.

A session (``dap.oidc_sessions``) is what the callback leaves behind: the provider's ID token and
refresh token, under the SHA-256 of a random handle that only the browser's HttpOnly cookie
holds. The UI claims the ID token with that cookie (never through a URL), renews it through the
refresh token before it expires and ends the session on sign-out (the row is deleted). Sessions
expire after ``SESSION_TTL`` whatever the provider's refresh tokens allow.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from dap.server.storage import db

FLOW_TTL = 600  # seconds between the redirect to the provider and the callback
SESSION_TTL = 12 * 3600

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.oidc_flows (
    state_hash bytea PRIMARY KEY,
    tenant_id uuid NOT NULL,
    provider text NOT NULL,
    nonce text NOT NULL,
    verifier text NOT NULL,
    redirect_uri text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS dap.oidc_sessions (
    handle_hash bytea PRIMARY KEY,
    tenant_id uuid NOT NULL,
    provider text NOT NULL,
    id_token text NOT NULL,
    refresh_token text,
    expires_at timestamptz NOT NULL
);
"""


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclass(frozen=True)
class Flow:
    provider: str
    nonce: str
    verifier: str
    redirect_uri: str


@dataclass(frozen=True)
class Session:
    provider: str
    id_token: str
    refresh_token: str | None


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def start_flow(conn: db.Connection, tenant: uuid.UUID, flow: Flow) -> str:
    """A new ``state`` for ``flow``; expired requests of every tenant are swept on the way."""
    state = secrets.token_urlsafe(32)
    await conn.execute("DELETE FROM dap.oidc_flows WHERE expires_at < now()")
    await conn.execute(
        """INSERT INTO dap.oidc_flows
               (state_hash, tenant_id, provider, nonce, verifier, redirect_uri, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))""",
        digest(state),
        tenant,
        flow.provider,
        flow.nonce,
        flow.verifier,
        flow.redirect_uri,
        float(FLOW_TTL),
    )
    return state


async def take_flow(conn: db.Connection, tenant: uuid.UUID, state: str) -> Flow | None:
    """The request of ``state``, gone for good; ``None`` when unknown, used, expired or another tenant's."""
    row = await conn.fetchrow(
        """DELETE FROM dap.oidc_flows WHERE state_hash = $1 AND tenant_id = $2 AND expires_at > now()
           RETURNING provider, nonce, verifier, redirect_uri""",
        digest(state),
        tenant,
    )
    if row is None:
        return None
    return Flow(row["provider"], row["nonce"], row["verifier"], row["redirect_uri"])


async def open_session(conn: db.Connection, tenant: uuid.UUID, session: Session) -> str:
    """A new session; the returned handle goes into the browser's cookie and nowhere else."""
    handle = secrets.token_urlsafe(32)
    await conn.execute("DELETE FROM dap.oidc_sessions WHERE expires_at < now()")
    await conn.execute(
        """INSERT INTO dap.oidc_sessions
               (handle_hash, tenant_id, provider, id_token, refresh_token, expires_at)
           VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))""",
        digest(handle),
        tenant,
        session.provider,
        session.id_token,
        session.refresh_token,
        float(SESSION_TTL),
    )
    return handle


async def find_session(conn: db.Connection, tenant: uuid.UUID, handle: str) -> Session | None:
    row = await conn.fetchrow(
        """SELECT provider, id_token, refresh_token FROM dap.oidc_sessions
           WHERE handle_hash = $1 AND tenant_id = $2 AND expires_at > now()""",
        digest(handle),
        tenant,
    )
    return None if row is None else Session(row["provider"], row["id_token"], row["refresh_token"])


async def renew_session(conn: db.Connection, tenant: uuid.UUID, handle: str, session: Session) -> None:
    await conn.execute(
        """UPDATE dap.oidc_sessions SET id_token = $3, refresh_token = $4
           WHERE handle_hash = $1 AND tenant_id = $2""",
        digest(handle),
        tenant,
        session.id_token,
        session.refresh_token,
    )


async def end_session(conn: db.Connection, tenant: uuid.UUID, handle: str) -> Session | None:
    row = await conn.fetchrow(
        """DELETE FROM dap.oidc_sessions WHERE handle_hash = $1 AND tenant_id = $2
           RETURNING provider, id_token, refresh_token""",
        digest(handle),
        tenant,
    )
    return None if row is None else Session(row["provider"], row["id_token"], row["refresh_token"])
