"""Provider tokens verified with the provider's published keys (OpenID discovery and JWKS).

Each issuer's discovery document (``{issuer}/.well-known/openid-configuration``) and key set
(its ``jwks_uri``) are fetched on first use and cached. A token whose ``kid`` is not in the cache
makes one refetch of the key set, so a provider that rotates its signing key is followed without
a restart. Fetches of each of an issuer's two documents (discovery, key set) are at least
``min_refresh`` seconds apart whether they succeed or fail: a failed fetch is remembered and
answered (503 with the seconds left in ``Retry-After``) until the interval has passed, so neither a
stream of tokens with made-up ``kid`` values nor a provider that answers 500 turns the server into
a load on it. The floor is per document, so a sign-in start (discovery only) does not hold back
the key set its callback needs a moment later.

A verified token is remembered per issuer under the rules it was verified by (audience,
algorithms, leeway: ``_rules``), not the token alone: two workspaces may trust the same issuer
with different declarations, and a token one of them accepted must still meet the other's.

The algorithm comes from the provider's declared list (RS256, ES256, EdDSA), must agree with the
key's type, and is the only one pyjwt is given: ``alg: none`` and HMAC with a public key as
secret never verify. ``iss`` must equal the declared issuer, ``aud`` hold the declared audience,
``exp``/``iat`` are required and ``exp``/``nbf`` are checked with the declared leeway (bounded in
``providers``). Every failure is :class:`~dap.server.errors.Unauthorized` with an ``SVC.AUTH``
code; an unreachable provider is 503.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import jwt

from dap.server import errors
from dap.server.access.providers import Provider

MIN_REFRESH = 5.0  # seconds between two key-set fetches of one issuer
FETCH_TIMEOUT = 10.0
CACHE_SIZE = 10_000  # verified tokens remembered per issuer


RETRY_AFTER = 10  # seconds a caller waits when the provider cannot be reached


def unavailable(message: str, *, code: str = "SVC.AUTH.PROVIDER_UNAVAILABLE") -> errors.ServiceUnavailable:
    return errors.ServiceUnavailable(message, retry_after=RETRY_AFTER, code=code)


def _invalid(message: str, code: str = "SVC.AUTH.INVALID_TOKEN") -> errors.Unauthorized:
    return errors.Unauthorized(message, code=code)


Rules = tuple[str, tuple[str, ...], int]  # audience, algorithms, leeway: what a verification checked


def _rules(provider: Provider, audience: str) -> Rules:
    """What a verification of ``provider``'s token depends on beyond the token and the issuer's keys
    (the issuer is the cache's own): a remembered result is reused only under the same rules."""
    return (audience, provider.algorithms, provider.leeway)


T = TypeVar("T")


@dataclass
class _Tries:
    """When one document of an issuer was last fetched, and what that met when it failed."""

    at: float | None = None  # monotonic
    failure: errors.ServiceUnavailable | None = None


@dataclass
class _Issuer:
    discovery: dict[str, Any] | None = None
    keys: dict[str, jwt.PyJWK] = field(default_factory=dict)
    verified: dict[tuple[str, Rules], tuple[float, dict[str, Any]]] = field(default_factory=dict)
    discovery_tries: _Tries = field(default_factory=_Tries)
    key_tries: _Tries = field(default_factory=_Tries)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one fetch of an issuer at a time


class KeySets:
    """Discovery documents and signing keys of every provider, shared by the process."""

    def __init__(self, *, min_refresh: float = MIN_REFRESH) -> None:
        self.min_refresh = min_refresh
        self._issuers: dict[str, _Issuer] = {}
        self._http: aiohttp.ClientSession | None = None
        self.fetches = 0  # key-set fetches so far (the rotation test reads it)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _get_json(self, url: str) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT))
        try:
            async with self._http.get(url, headers={"Accept": "application/json"}) as response:
                if response.status != 200:
                    raise unavailable(
                        f"the identity provider answered {response.status} for {url}",
                        code="SVC.AUTH.PROVIDER_UNAVAILABLE",
                    )
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise unavailable(
                f"the identity provider is unreachable at {url}: {exc!r}",
                code="SVC.AUTH.PROVIDER_UNAVAILABLE",
            ) from exc
        if not isinstance(body, dict):
            raise unavailable(
                f"the identity provider sent no JSON object at {url}", code="SVC.AUTH.PROVIDER_UNAVAILABLE"
            )
        return body

    def _state(self, issuer: str) -> _Issuer:
        return self._issuers.setdefault(issuer, _Issuer())

    async def _fetch(self, tries: _Tries, fetch: Callable[[], Awaitable[T]]) -> T | None:
        """``fetch()`` unless the last try was within the interval: then ``None`` after a success,
        and that failure again after a failure (the caller learns the provider is unavailable,
        and when to retry). The time and any failure of this try are remembered."""
        if tries.at is not None:
            left = self.min_refresh - (time.monotonic() - tries.at)
            if left > 0 and tries.failure is not None:
                raise errors.ServiceUnavailable(
                    str(tries.failure), retry_after=max(1, math.ceil(left)), code=tries.failure.code
                )
            if left > 0:
                return None
        tries.at, tries.failure = time.monotonic(), None
        try:
            return await fetch()
        except errors.ServiceUnavailable as exc:
            tries.failure = exc
            raise

    async def _fetch_discovery(self, provider: Provider) -> dict[str, Any]:
        doc = await self._get_json(provider.issuer.rstrip("/") + "/.well-known/openid-configuration")
        if doc.get("issuer") != provider.issuer:
            raise unavailable(
                f"the discovery document names issuer {doc.get('issuer')!r}, not {provider.issuer!r}",
                code="SVC.AUTH.PROVIDER_MISCONFIGURED",
            )
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(doc.get(key), str):
                raise unavailable(
                    f"the discovery document of {provider.issuer} lacks {key}",
                    code="SVC.AUTH.PROVIDER_MISCONFIGURED",
                )
        return doc

    async def _known_discovery(self, entry: _Issuer, provider: Provider) -> dict[str, Any]:
        """The discovery document, fetched when unknown (the issuer's lock held)."""
        if entry.discovery is None:
            fetch = functools.partial(self._fetch_discovery, provider)
            entry.discovery = await self._fetch(entry.discovery_tries, fetch)
        if entry.discovery is None:  # a successful fetch keeps it: only a failure leaves none
            raise unavailable(f"the discovery document of {provider.issuer} is not known yet: retry shortly")
        return entry.discovery

    async def discovery(self, provider: Provider) -> dict[str, Any]:
        """The provider's discovery document, fetched once; its ``issuer`` must be the declared one."""
        entry = self._state(provider.issuer)
        if entry.discovery is not None:
            return entry.discovery
        async with entry.lock:
            return await self._known_discovery(entry, provider)

    async def _refresh(self, provider: Provider, *, force: bool) -> None:
        entry = self._state(provider.issuer)
        async with entry.lock:
            if entry.keys and not force:  # another request fetched them while this one waited
                return
            doc = await self._known_discovery(entry, provider)
            keys = await self._fetch(entry.key_tries, functools.partial(self._fetch_keys, doc["jwks_uri"]))
            if keys is None:  # fetched within the interval: what it gave stands
                return
            if set(entry.keys) - set(keys):  # a key was withdrawn: forget what it vouched for
                entry.verified.clear()
            entry.keys = keys

    async def _fetch_keys(self, jwks_uri: str) -> dict[str, jwt.PyJWK]:
        jwks = await self._get_json(jwks_uri)
        self.fetches += 1
        keys: dict[str, jwt.PyJWK] = {}
        for raw in jwks.get("keys", []):
            if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(raw)
            except jwt.PyJWTError:  # a key type or curve we do not take
                continue
            keys[key.key_id or ""] = key
        return keys

    async def _key(self, provider: Provider, kid: str) -> jwt.PyJWK:
        entry = self._state(provider.issuer)
        if kid not in entry.keys:
            await self._refresh(provider, force=bool(entry.keys))
        key = entry.keys.get(kid)
        if key is None:
            raise _invalid(
                f"no key {kid!r} among the signing keys of {provider.issuer}", "SVC.AUTH.UNKNOWN_KEY"
            )
        return key

    async def verify(self, provider: Provider, token: str, *, audience: str | None = None) -> dict[str, Any]:
        """The claims of ``token`` once signature, issuer, audience and times hold.

        A verified token is remembered until its ``exp`` (a signature check costs about a
        millisecond, more than a find-by-id) under the rules it met (``_rules``), so a declaration
        with other algorithms, leeway or audience verifies it afresh; the memory is bounded and
        emptied when the provider withdraws a key, so a token stays accepted only while its key
        is published.
        """
        entry = self._state(provider.issuer)
        wanted = audience or provider.audience
        remembered = (token, _rules(provider, wanted))
        hit = entry.verified.get(remembered)
        if hit is not None and hit[0] > time.time():
            return hit[1]
        claims = await self._verify(provider, token, wanted)
        if len(entry.verified) >= CACHE_SIZE:
            entry.verified.clear()
        entry.verified[remembered] = (float(claims["exp"]), claims)
        return claims

    async def _verify(self, provider: Provider, token: str, audience: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _invalid("the token is malformed: expected a JWT (three base64url parts)") from exc
        alg = header.get("alg")
        if alg not in provider.algorithms:
            raise _invalid(
                f"the token's algorithm {alg!r} is not accepted (accepted: {list(provider.algorithms)})",
                "SVC.AUTH.BAD_ALGORITHM",
            )
        kid = header.get("kid", "")
        key = await self._key(provider, kid if isinstance(kid, str) else "")
        if key.algorithm_name != alg:
            raise _invalid(
                f"key {kid!r} is a {key.algorithm_name} key, the token says {alg}", "SVC.AUTH.BAD_ALGORITHM"
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=audience,
                issuer=provider.issuer,
                leeway=provider.leeway,
                options={"require": ["exp", "iat", "iss", "sub", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _invalid("the token has expired", "SVC.AUTH.TOKEN_EXPIRED") from exc
        except jwt.InvalidIssuerError as exc:
            raise _invalid("the token's issuer is not accepted", "SVC.AUTH.BAD_ISSUER") from exc
        except jwt.InvalidAudienceError as exc:
            raise _invalid("the token was issued for another audience", "SVC.AUTH.BAD_AUDIENCE") from exc
        except jwt.ImmatureSignatureError as exc:
            raise _invalid("the token is not valid yet (nbf or iat is in the future)") from exc
        except jwt.InvalidSignatureError as exc:
            raise _invalid("the token's signature does not verify with the provider's key") from exc
        except jwt.PyJWTError as exc:
            raise _invalid(f"invalid token: {exc}") from exc
        return claims
