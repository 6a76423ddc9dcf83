"""Tokens for trying a workspace: the claims a dap server expects, signed like its issuer would.

``dap dev`` verifies HS256 tokens with a fixed dev secret, so that a token made by ``dap token``
in another terminal (or another session) is accepted without copying anything. The claims are
those of the architecture: ``sub``, ``username``, ``roles``, ``workspace``, ``attrs``, ``iss``,
``iat``, ``exp``. With a PEM private key the token is RS256 or ES256 (by the key's type), for
a server started with the matching ``--jwt-public-key``.

PyJWT is used directly rather than the server's verifier: the verifier issues only where the
server holds the secret, and this module must also sign for servers that do not run here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from dap.resource_pod import errors

# Fixed, and printed by `dap dev`: anyone can forge a token for a server using it — dev only.
DEV_SECRET = "dap-dev-secret--not-for-production--0123456789"
DEV_ISSUER = "svc"
DEV_WORKSPACE = "default"
DEFAULT_TTL = 24 * 3600


def parse_attrs(items: Sequence[str]) -> dict[str, Any]:
    """``["region=north", "limit=5"]`` → ``{"region": "north", "limit": 5}``.

    A value that parses as JSON is taken as JSON (numbers, booleans, lists); anything else is a
    string, so ``region=north`` needs no quoting.
    """
    attrs: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise errors.ConfigError(f"--attr {item!r} must be KEY=VALUE, e.g. --attr region=north")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        attrs[key.strip()] = value
    return attrs


def claims(
    *,
    username: str,
    roles: Sequence[str],
    workspace: str | None,
    attrs: Mapping[str, Any],
    ttl: float,
    issuer: str = DEV_ISSUER,
    sub: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The claim set; ``workspace=None`` leaves the claim out (the token is good for any workspace)."""
    if ttl <= 0:
        raise errors.ConfigError("--ttl must be positive, e.g. 24h or 15m")
    issued = int(time.time() if now is None else now)
    body: dict[str, Any] = {
        "sub": sub or username,
        "username": username,
        "roles": list(roles),
        "attrs": dict(attrs),
        "iss": issuer,
        "iat": issued,
        "exp": issued + int(ttl),
    }
    if workspace is not None:
        body["workspace"] = workspace
    return body


def _algorithm(private_key_pem: str) -> str:
    try:
        key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise errors.ConfigError("--private-key is not an unencrypted PEM private key (RSA or EC)") from exc
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "ES256"
    raise errors.ConfigError("--private-key must be an RSA (RS256) or EC P-256 (ES256) key")


def sign(body: Mapping[str, Any], *, secret: str = DEV_SECRET, private_key_pem: str | None = None) -> str:
    """``body`` signed with HS256 and ``secret``, or with ``private_key_pem`` when given."""
    if private_key_pem is not None:
        return jwt.encode(dict(body), private_key_pem, algorithm=_algorithm(private_key_pem))
    if not secret:
        raise errors.ConfigError("the JWT secret is empty: give --secret (DAP_JWT_SECRET)")
    return jwt.encode(dict(body), secret, algorithm="HS256")


def dev_token(
    workspace: str = DEV_WORKSPACE,
    *,
    username: str = "dev",
    roles: Sequence[str] = ("admin",),
    attrs: Mapping[str, Any] | None = None,
    ttl: float = DEFAULT_TTL,
) -> str:
    """A token ``dap dev`` accepts (HS256 with the dev secret)."""
    body = claims(username=username, roles=roles, workspace=workspace, attrs=attrs or {}, ttl=ttl)
    return sign(body)
