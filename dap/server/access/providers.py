"""OpenID Connect providers declared in a workspace's manifest, and their claims mapped to a caller.

The spec declares ``Workspace.spec.auth.providers`` (provider name → OAuth configuration) and
leaves the configuration's keys open (platform-spec "Gaps"); this module fixes them::

    auth:
      providers:
        dex:
          title: Company sign-in                 # the login page's button (default: the name)
          issuer: https://id.example.com/dex     # discovery: {issuer}/.well-known/openid-configuration
          client_id: dap
          client_secret_env: DAP_OIDC_DEX_SECRET # the secret is never in a manifest
          scopes: [openid, profile, email, groups, offline_access]
          audience: dap                          # the tokens' aud (default: client_id)
          username_claim: email                  # default: preferred_username, then email, then sub
          roles_claim: groups                    # a string or list claim
          roles: {approvers: [finance], buyers: [buyer]}   # claim value → spec roles
          attributes: {region: region}          # principal attribute → claim
          algorithms: [RS256, ES256, EdDSA]      # default: all three
          leeway: 30                             # seconds of clock skew on exp/nbf/iat, at most 120

Parsing and mapping are pure functions; ``keysets`` verifies signatures, ``web.oidc`` runs the
browser flow. A provider's caller gets ``sub`` ``"<provider>:<provider's sub>"``, so the audit
trail (``actor_sub``) names the provider that vouched for every write.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dap.server import errors
from dap.server.access.auth import Principal

ALGORITHMS = ("RS256", "ES256", "EdDSA")
MAX_LEEWAY = 120
DEFAULT_LEEWAY = 30
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
KEYS = {
    "title",
    "issuer",
    "client_id",
    "client_secret_env",
    "scopes",
    "audience",
    "username_claim",
    "roles_claim",
    "roles",
    "attributes",
    "algorithms",
    "leeway",
}


class ProviderRefused(errors.BootRefused):
    """A provider's declaration cannot be used (named key, reason)."""


@dataclass(frozen=True)
class Provider:
    """One declared provider of one workspace."""

    name: str
    issuer: str
    client_id: str
    title: str
    client_secret_env: str | None = None
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    audience: str = ""
    username_claim: str | None = None
    roles_claim: str | None = None
    roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    attributes: Mapping[str, str] = field(default_factory=dict)
    algorithms: tuple[str, ...] = ALGORITHMS
    leeway: int = DEFAULT_LEEWAY

    @property
    def client_secret(self) -> str | None:
        """The secret from the environment, read when used (a rotated secret needs no reload)."""
        return os.environ.get(self.client_secret_env) if self.client_secret_env else None


def _strings(value: Any, key: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProviderRefused(f"auth provider {name!r}: {key} must be a list of strings")
    return tuple(value)


def _text(raw: Mapping[str, Any], key: str, name: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ProviderRefused(f"auth provider {name!r}: {key} must be a non-empty string")
    return value


def parse(name: str, raw: Mapping[str, Any]) -> Provider:
    """One provider's declaration checked and typed; ``ProviderRefused`` names what is wrong."""
    if not NAME.fullmatch(name):
        raise ProviderRefused(f"auth provider name {name!r}: lower-case letters, digits, _ and -")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ProviderRefused(f"auth provider {name!r}: unknown keys {unknown}; known: {sorted(KEYS)}")
    issuer = _text(raw, "issuer", name, required=True)
    assert issuer is not None
    if not issuer.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
        raise ProviderRefused(f"auth provider {name!r}: issuer must be https (http only on loopback)")
    client_id = _text(raw, "client_id", name, required=True)
    assert client_id is not None
    scopes = _strings(raw.get("scopes", ["openid", "profile", "email"]), "scopes", name)
    if "openid" not in scopes:
        raise ProviderRefused(f"auth provider {name!r}: scopes must include 'openid'")
    roles_raw = raw.get("roles", {})
    if not isinstance(roles_raw, dict):
        raise ProviderRefused(f"auth provider {name!r}: roles maps claim values to lists of roles")
    roles = {str(k): _strings(v, f"roles.{k}", name) for k, v in roles_raw.items()}
    attrs_raw = raw.get("attributes", {})
    if not isinstance(attrs_raw, dict) or not all(isinstance(v, str) for v in attrs_raw.values()):
        raise ProviderRefused(f"auth provider {name!r}: attributes maps attribute names to claim names")
    algorithms = _strings(raw.get("algorithms", list(ALGORITHMS)), "algorithms", name)
    if not set(algorithms) <= set(ALGORITHMS):
        raise ProviderRefused(f"auth provider {name!r}: algorithms are among {list(ALGORITHMS)}")
    leeway = raw.get("leeway", DEFAULT_LEEWAY)
    if not isinstance(leeway, int) or isinstance(leeway, bool) or not 0 <= leeway <= MAX_LEEWAY:
        raise ProviderRefused(f"auth provider {name!r}: leeway is 0 to {MAX_LEEWAY} seconds")
    return Provider(
        name=name,
        issuer=issuer,
        client_id=client_id,
        title=_text(raw, "title", name) or name,
        client_secret_env=_text(raw, "client_secret_env", name),
        scopes=scopes,
        audience=_text(raw, "audience", name) or client_id,
        username_claim=_text(raw, "username_claim", name),
        roles_claim=_text(raw, "roles_claim", name),
        roles=roles,
        attributes=dict(attrs_raw),
        algorithms=algorithms,
        leeway=leeway,
    )


def parse_all(providers: Mapping[str, Any]) -> dict[str, Provider]:
    out: dict[str, Provider] = {}
    for name, raw in providers.items():
        if not isinstance(raw, dict):
            raise ProviderRefused(f"auth provider {name!r}: expected an object")
        out[name] = parse(name, raw)
    return out


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
