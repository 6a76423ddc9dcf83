"""JWT verification (and, with an HS256 secret, issuing) for the REST API.

The algorithm is fixed by configuration, never read from the token header: HS256 with
``--jwt-secret``, RS256 or ES256 with ``--jwt-public-key`` (chosen by the key's type). pyjwt is
always called with exactly that one algorithm, which refuses ``alg: none`` and algorithm
confusion (an HS256 token signed with the public key as secret). Claims follow ARCHITECTURE.md:
``sub``, ``username``, ``roles``, ``workspace``, ``attrs``, ``iss``, ``exp``, ``iat``. Every
pyjwt error becomes :class:`~dap.server.errors.Unauthorized`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from dap.server import errors

DEFAULT_TOKEN_TTL = 3600
CACHE_SIZE = 10_000


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one request."""

    sub: str
    username: str
    roles: tuple[str, ...] = ()
    workspace: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


class JwtVerifier:
    """Verifies bearer tokens with the one configured algorithm and key."""

    def __init__(self, *, issuer: str, secret: str | None = None, public_key_pem: str | None = None) -> None:
        if (secret is None) == (public_key_pem is None):
            raise errors.BootRefused("exactly one of the JWT secret and the JWT public key is required")
        self.issuer = issuer
        self._secret = secret
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._bound: dict[tuple[str, str], Principal] = {}  # verified principals with the URL's workspace
        self._key: Any
        if secret is not None:
            self.algorithm = "HS256"
            self._key = secret
        else:
            assert public_key_pem is not None
            try:
                key = serialization.load_pem_public_key(public_key_pem.encode())
            except ValueError as exc:
                raise errors.BootRefused("--jwt-public-key is not a PEM public key") from exc
            if isinstance(key, rsa.RSAPublicKey):
                self.algorithm = "RS256"
            elif isinstance(key, ec.EllipticCurvePublicKey):
                self.algorithm = "ES256"
            else:
                raise errors.BootRefused("--jwt-public-key must be an RSA or ECDSA public key")
            self._key = key

    @property
    def can_issue(self) -> bool:
        """Whether this server holds the HS256 secret and may issue tokens (``/_ui/login``)."""
        return self._secret is not None

    def verify(self, token: str, *, workspace: str, bind: bool = False) -> Principal:
        """Decode ``token`` and check it for the workspace ``workspace``; raise ``Unauthorized``.

        A verified token is remembered until its ``exp`` (signature checks dominate the cost of a
        find-by-id); the cache is bounded (emptied when full) and only ever holds tokens that
        passed every check with this verifier's one key. A key is fixed for the verifier's life:
        a rotated key is a new verifier (a restart, or the pod's new server), with an empty cache,
        so no token verified under an old key is ever taken from it. ``bind`` gives a token that
        names no workspace the URL's one (row scope and session values see it), also kept.
        """
        hit = self._cache.get(token)
        if hit is not None and hit[0] > time.time():
            principal = hit[1]
        else:
            principal, expires = self._decode(token)
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
                self._bound.clear()
            self._cache[token] = (expires, principal)
        if principal.workspace is not None and principal.workspace != workspace:
            raise errors.Unauthorized(
                "the token was issued for another workspace", code="SVC.AUTH.WRONG_WORKSPACE"
            )
        if bind and principal.workspace is None:  # only reached while the token's entry is valid
            bound = self._bound.get((token, workspace))
            if bound is None:
                if len(self._bound) >= CACHE_SIZE:
                    self._bound.clear()
                bound = self._bound[(token, workspace)] = dataclasses.replace(principal, workspace=workspace)
            return bound
        return principal

    def _decode(self, token: str) -> tuple[Principal, float]:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[self.algorithm],
                issuer=self.issuer,
                # the time claims are checked in _required_claims, after their types
                options={
                    "require": ["exp", "iss", "sub"],
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.ExpiredSignatureError as exc:
            raise errors.Unauthorized("the token has expired", code="SVC.AUTH.TOKEN_EXPIRED") from exc
        except jwt.InvalidIssuerError as exc:
            raise errors.Unauthorized(
                "the token's issuer is not accepted", code="SVC.AUTH.BAD_ISSUER"
            ) from exc
        except jwt.InvalidSignatureError as exc:
            raise _invalid("the token's signature does not verify with this server's key") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise _invalid(f"the token lacks the claim {exc.claim!r}") from exc
        except jwt.DecodeError as exc:  # the decoder's own words name bytes and codecs: say what it is
            raise _invalid("the token is malformed: expected a JWT (three base64url parts)") from exc
        except jwt.PyJWTError as exc:
            raise _invalid(f"invalid token: {exc}") from exc
        sub, username, exp = _required_claims(claims)
        claimed_ws = claims.get("workspace")
        if claimed_ws is not None and not isinstance(claimed_ws, str):
            raise _invalid("claim 'workspace' must be a string")
        roles = claims.get("roles", [])
        attrs = claims.get("attrs", {})
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise _invalid("claim 'roles' must be a list of strings")
        if not isinstance(attrs, dict):
            raise _invalid("claim 'attrs' must be an object")
        principal = Principal(
            sub=sub, username=username, roles=tuple(roles), workspace=claimed_ws, attrs=attrs
        )
        return principal, exp

    def issue(
        self,
        *,
        sub: str,
        username: str,
        roles: tuple[str, ...] | list[str],
        workspace: str,
        ttl: int = DEFAULT_TOKEN_TTL,
        attrs: dict[str, Any] | None = None,
    ) -> str:
        """A signed HS256 token; only where the server holds the secret."""
        if self._secret is None:
            raise errors.NotImplementedHere(
                "this server verifies tokens with a public key and cannot issue them",
                code="SVC.AUTH.LOGIN_UNAVAILABLE",
            )
        now = int(time.time())
        claims = {
            "sub": sub,
            "username": username,
            "roles": list(roles),
            "workspace": workspace,
            "attrs": attrs or {},
            "iss": self.issuer,
            "iat": now,
            "exp": now + ttl,
        }
        return jwt.encode(claims, self._secret, algorithm="HS256")


def _invalid(message: str) -> errors.Unauthorized:
    return errors.Unauthorized(message, code="SVC.AUTH.INVALID_TOKEN")


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _required_claims(claims: dict[str, Any]) -> tuple[str, str, float]:
    """``sub``, ``username`` and ``exp`` as RFC 7519 types them, or ``Unauthorized``.

    PyJWT converts ``exp`` with ``int()``, so a string date such as ``"9999999999"`` would pass its
    check; an empty ``sub`` would make every such token the same caller. Both are refused here.
    """
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub.strip():
        raise _invalid("claim 'sub' must be a non-empty string")
    username = claims.get("username", sub)
    if not isinstance(username, str) or not username.strip():
        raise _invalid("claim 'username' must be a non-empty string")
    for name in ("exp", "iat", "nbf"):
        if name in claims and not _numeric(claims[name]):
            raise _invalid(f"claim {name!r} must be a NumericDate (seconds since the epoch, a number)")
    now = time.time()
    if claims["exp"] <= now:
        raise errors.Unauthorized("the token has expired", code="SVC.AUTH.TOKEN_EXPIRED")
    if "nbf" in claims and claims["nbf"] > now:
        raise _invalid("the token is not valid yet (nbf is in the future)")
    return sub, username, float(claims["exp"])


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; raise ``Unauthorized`` otherwise."""
    if not header:
        raise errors.Unauthorized("no Authorization header: send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise errors.Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token.strip()
