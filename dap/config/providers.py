"""OpenID Connect providers as a workspace declares them: the keys of one, checked and typed.

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

The rule lives here, below both its users, so that one parse decides for every path: the
manifests' validation (``validation.signins``: ``dap validate``, registration at the control,
``dap serve``'s boot, a resource pod's load of an artifact) and the server, which maps a
verified token to a caller with the parsed declaration (``dap.server.access.providers``). A
declaration this parse refuses therefore never reaches a running server, where it could only
fail every request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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


class DeclarationError(ValueError):
    """A provider's declaration cannot be used; ``key`` names the offending key ("" for the whole)."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


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


def _strings(value: Any, key: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DeclarationError(f"auth provider {name!r}: {key} must be a list of strings", key)
    return tuple(value)


def _text(raw: Mapping[str, Any], key: str, name: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DeclarationError(f"auth provider {name!r}: {key} must be a non-empty string", key)
    return value


def _algorithms(raw: Mapping[str, Any], name: str) -> tuple[str, ...]:
    algorithms = _strings(raw.get("algorithms", list(ALGORITHMS)), "algorithms", name)
    refused = [a for a in algorithms if a not in ALGORITHMS]
    if refused or not algorithms:
        raise DeclarationError(
            f"auth provider {name!r}: algorithms are among {list(ALGORITHMS)}, not {refused or '[]'}"
            " (a provider signs with a private key; HMAC would make its public key a shared secret)",
            "algorithms",
        )
    return algorithms


def _leeway(raw: Mapping[str, Any], name: str) -> int:
    leeway = raw.get("leeway", DEFAULT_LEEWAY)
    if not isinstance(leeway, int) or isinstance(leeway, bool) or not 0 <= leeway <= MAX_LEEWAY:
        raise DeclarationError(
            f"auth provider {name!r}: leeway is 0 to {MAX_LEEWAY} seconds of clock skew, not {leeway!r}",
            "leeway",
        )
    return leeway


def parse(name: str, raw: Mapping[str, Any]) -> Provider:
    """One provider's declaration checked and typed; ``DeclarationError`` names what is wrong."""
    if not NAME.fullmatch(name):
        raise DeclarationError(f"auth provider name {name!r}: lower-case letters, digits, _ and -")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise DeclarationError(
            f"auth provider {name!r}: unknown keys {unknown}; known: {sorted(KEYS)}", unknown[0]
        )
    issuer = _text(raw, "issuer", name, required=True)
    assert issuer is not None
    if not issuer.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
        raise DeclarationError(
            f"auth provider {name!r}: issuer must be https (http only on loopback)", "issuer"
        )
    client_id = _text(raw, "client_id", name, required=True)
    assert client_id is not None
    scopes = _strings(raw.get("scopes", ["openid", "profile", "email"]), "scopes", name)
    if "openid" not in scopes:
        raise DeclarationError(f"auth provider {name!r}: scopes must include 'openid'", "scopes")
    roles_raw = raw.get("roles", {})
    if not isinstance(roles_raw, dict):
        raise DeclarationError(f"auth provider {name!r}: roles maps claim values to lists of roles", "roles")
    roles = {str(k): _strings(v, f"roles.{k}", name) for k, v in roles_raw.items()}
    attrs_raw = raw.get("attributes", {})
    if not isinstance(attrs_raw, dict) or not all(isinstance(v, str) for v in attrs_raw.values()):
        raise DeclarationError(
            f"auth provider {name!r}: attributes maps attribute names to claim names", "attributes"
        )
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
        algorithms=_algorithms(raw, name),
        leeway=_leeway(raw, name),
    )


def parse_all(providers: Mapping[str, Any]) -> dict[str, Provider]:
    """Every provider of one workspace; ``DeclarationError`` names the first that is wrong."""
    out: dict[str, Provider] = {}
    for name, raw in providers.items():
        if not isinstance(raw, dict):
            raise DeclarationError(f"auth provider {name!r}: expected an object")
        out[name] = parse(name, raw)
    return out
