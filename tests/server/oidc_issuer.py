"""A minimal OpenID issuer on loopback whose signing keys the tests hold and rotate.

It serves a discovery document and a JWKS (RS256, ES256 or EdDSA keys made here) and signs ID
tokens with the key it currently publishes. Dex rotates its keys on a schedule of hours, so the
rotation test uses this issuer: it rotates on demand while the dap server keeps running. Its
discovery document and JWKS can be made to fail (``discovery_status``, ``jwks_status``), and it
counts the requests each receives, so a test sees how often the dap server asks.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm


def _new_key(alg: str) -> Any:
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def _public_jwk(alg: str, key: Any, kid: str) -> dict[str, Any]:
    codec = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[alg]
    jwk: dict[str, Any] = json.loads(codec.to_jwk(key.public_key()))  # type: ignore[attr-defined]
    return {**jwk, "kid": kid, "use": "sig", "alg": alg}


class Issuer:
    """Start with ``await issuer.start()``; ``issuer.url`` is its issuer identifier."""

    def __init__(self, alg: str = "RS256") -> None:
        self.alg = alg
        self.kid = ""
        self.key: Any = None
        self.published: list[dict[str, Any]] = []
        self.jwks_requests = 0
        self.discovery_requests = 0
        self.discovery_status = 200  # anything else: the endpoint answers that status, no document
        self.jwks_status = 200
        self.url = ""
        self._runner: web.AppRunner | None = None
        self.rotate(alg)

    def rotate(self, alg: str | None = None) -> None:
        """A new signing key, published in place of the old one (which stops verifying)."""
        self.alg = alg or self.alg
        self.kid = uuid.uuid4().hex[:12]
        self.key = _new_key(self.alg)
        self.published = [_public_jwk(self.alg, self.key, self.kid)]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/keys", self._keys)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _discovery(self, _request: web.Request) -> web.Response:
        self.discovery_requests += 1
        if self.discovery_status != 200:
            return web.Response(status=self.discovery_status, text="the issuer is failing")
        return web.json_response(
            {
                "issuer": self.url,
                "authorization_endpoint": f"{self.url}/auth",
                "token_endpoint": f"{self.url}/token",
                "jwks_uri": f"{self.url}/keys",
                "end_session_endpoint": f"{self.url}/logout",
                "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
            }
        )

    async def _keys(self, _request: web.Request) -> web.Response:
        self.jwks_requests += 1
        if self.jwks_status != 200:
            return web.Response(status=self.jwks_status, text="the issuer is failing")
        return web.json_response({"keys": self.published})

    def token(self, *, sub: str = "u-1", aud: str = "dap", ttl: int = 300, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "sub": sub, "aud": aud, "iat": now, "exp": now + ttl, **claims}
        return jwt.encode(body, self.key, algorithm=self.alg, headers={"kid": self.kid})
