"""Who calls: a bearer token checked by this server's key or by a provider the workspace declares.

A token whose (unverified) ``iss`` is the issuer of one of the workspace's providers
(``Workspace.spec.auth.providers``) is verified with that provider's published keys
(``access.keysets``) and mapped to a caller by the provider's declaration
(``access.providers``); every other token goes to the local verifier (``access.auth``), as before.
The issuer only picks the verifier: a token naming a provider's issuer but signed otherwise fails
that provider's checks, and never reaches the local key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jwt
from aiohttp import web

from dap.server import state
from dap.server.access import auth, keysets, providers

KEYSETS: web.AppKey[keysets.KeySets] = web.AppKey("oidc_keysets", keysets.KeySets)
_PARSED: dict[int, tuple[Mapping[str, Any], dict[str, providers.Provider]]] = {}


def declared(app: web.Application, workspace: str) -> dict[str, providers.Provider]:
    """The providers of ``workspace`` in the catalog served now (parsed once per declaration)."""
    spec = app[state.SPEC].current.workspaces.get(workspace)
    raw = spec.auth.providers if spec is not None and spec.auth is not None else {}
    if not raw:
        return {}
    hit = _PARSED.get(id(raw))
    if hit is None or hit[0] is not raw:
        if len(_PARSED) > 64:
            _PARSED.clear()
        hit = _PARSED[id(raw)] = (raw, providers.parse_all(raw))
    return hit[1]


def _issuer(token: str) -> str | None:
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    iss = claims.get("iss")
    return iss if isinstance(iss, str) else None


async def authenticate(
    app: web.Application, token: str, *, workspace: str, bind: bool = False
) -> auth.Principal:
    """The caller of ``token`` for ``workspace``; ``Unauthorized`` when no verifier accepts it.

    Every protocol asks here (REST, the websocket, gRPC), so a provider's token opens the same
    doors everywhere."""
    found = declared(app, workspace) if KEYSETS in app else {}
    if found:
        iss = _issuer(token)
        for provider in found.values():
            if provider.issuer == iss:
                claims = await app[KEYSETS].verify(provider, token)
                return providers.principal(provider, claims, workspace=workspace)
    return app[state.VERIFIER].verify(token, workspace=workspace, bind=bind)
