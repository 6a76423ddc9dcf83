"""OpenID Connect providers declared in a workspace's manifest, and their claims mapped to a caller.

The declaration's keys and their checks are ``dap.config.providers`` (the manifests' validation
refuses a declaration the server could not use, on every path that loads manifests); here a parse
failure becomes a boot refusal, and a verified token's claims become a caller. Mapping is a pure
function; ``keysets`` verifies signatures, ``web.oidc`` runs the browser flow. A provider's caller
gets ``sub`` ``"<provider>:<provider's sub>"``, so the audit trail (``actor_sub``) names the
provider that vouched for every write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dap.config import providers as declarations
from dap.config.providers import ALGORITHMS as ALGORITHMS
from dap.config.providers import Provider as Provider
from dap.server import errors
from dap.server.access.auth import Principal


class ProviderRefused(errors.BootRefused):
    """A provider's declaration cannot be used (named key, reason)."""


def parse(name: str, raw: Mapping[str, Any]) -> Provider:
    """One provider's declaration checked and typed; ``ProviderRefused`` names what is wrong."""
    try:
        return declarations.parse(name, raw)
    except declarations.DeclarationError as exc:
        raise ProviderRefused(str(exc)) from exc


def parse_all(providers: Mapping[str, Any]) -> dict[str, Provider]:
    try:
        return declarations.parse_all(providers)
    except declarations.DeclarationError as exc:
        raise ProviderRefused(str(exc)) from exc


def client_secret(provider: Provider) -> str | None:
    """The secret from the environment, read when used (a rotated secret needs no reload)."""
    return os.environ.get(provider.client_secret_env) if provider.client_secret_env else None


def _claim_values(claims: Mapping[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def principal(provider: Provider, claims: Mapping[str, Any], *, workspace: str) -> Principal:
    """The caller a verified token of ``provider`` stands for.

    Roles come only from ``roles`` (a claim value the mapping does not name grants nothing, so a
    provider's group called ``admin`` is not the platform's ``admin`` unless mapped so); the
    token's own ``roles`` claim is ignored. Attributes take the named claims that are present.
    """
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise errors.Unauthorized("the token lacks a subject", code="SVC.AUTH.INVALID_TOKEN")
    candidates = [provider.username_claim] if provider.username_claim else ["preferred_username", "email"]
    username = next(
        (claims[c] for c in candidates if isinstance(claims.get(c), str) and claims[c]),
        f"{provider.name}:{sub}",
    )
    granted: list[str] = []
    if provider.roles_claim:
        for value in _claim_values(claims, provider.roles_claim):
            for role in provider.roles.get(value, ()):
                if role not in granted:
                    granted.append(role)
    attrs = {name: claims[claim] for name, claim in provider.attributes.items() if claim in claims}
    attrs["provider"] = provider.name
    return Principal(
        sub=f"{provider.name}:{sub}",
        username=username,
        roles=tuple(granted),
        workspace=workspace,
        attrs=attrs,
    )
