"""Sign-in through a workspace's OpenID Connect providers: the authorization code flow with PKCE.

``GET /{ws}/_ui/providers`` lists the providers for the login page. ``GET
/{ws}/_ui/oidc/{provider}/start`` stores a fresh ``state``, ``nonce`` and PKCE verifier
(``access.signins``) and redirects the browser to the provider's authorization endpoint (S256
challenge). The provider sends it back to ``GET /{ws}/_ui/oidc/callback?code&state``: the
``state`` is taken once (a replayed or forged one is 403), the code is exchanged at the token
endpoint with the verifier and the client secret, the ID token is verified (keys, issuer,
audience, times: ``access.keysets``) and its ``nonce`` compared. The tokens stay on the server in
a session whose handle is an HttpOnly, SameSite=Lax cookie scoped to ``/{ws}/_ui/oidc``; the
browser is sent to ``/{ws}/#/signed-in`` with no token or code in the address.

The UI then ``POST``s ``_ui/oidc/session`` (the ID token, its expiry, the provider),
``_ui/oidc/refresh`` before the expiry (the refresh token's grant, verified again) and
``_ui/oidc/logout`` (the session is deleted; the answer carries the provider's
``end_session_endpoint`` URL with ``client_id`` and ``post_logout_redirect_uri`` where its
discovery document has one, for RP-initiated logout). The redirect URIs are built on
``DAP_PUBLIC_URL`` when it is set (a proxy that ends TLS), else on the request's address.
These POSTs need a JSON body, so a cross-site form cannot send them. The ID token is the bearer
token of the API (``identity``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import urllib.parse
from typing import Any

import aiohttp
from aiohttp import web

from dap.server import errors, identity, state
from dap.server.access import keysets, providers, signins, throttling
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.storage.workspaces import Workspace
from dap.server.web import requests

COOKIE = "dap_oidc"


def _cookie_path(workspace: str) -> str:
    return f"/{workspace}/_ui/oidc"


async def _workspace(request: web.Request) -> Workspace:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    return workspace


def _provider(request: web.Request, workspace: str, name: str) -> providers.Provider:
    found = identity.declared(request.app, workspace).get(name)
    if found is None:
        raise errors.NotFound(f"no sign-in provider {name!r} in this workspace", code="SVC.AUTH.NO_PROVIDER")
    return found


def public_base(request: web.Request) -> str:
    """The server's address as browsers reach it: ``DAP_PUBLIC_URL`` (behind a proxy that ends
    TLS, the request's own scheme would be http), else the request's scheme and host."""
    configured = os.environ.get("DAP_PUBLIC_URL", "").rstrip("/")
    return configured or str(request.url.origin())


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def list_providers(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    found = identity.declared(request.app, workspace.slug)
    data = [{"name": p.name, "title": p.title} for p in found.values()]
    return web.json_response({"data": data})


async def start(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    provider = _provider(request, workspace.slug, request.match_info["provider"])
    doc = await request.app[identity.KEYSETS].discovery(provider)
    verifier, challenge = pkce_pair()
    nonce = secrets.token_urlsafe(24)
    redirect_uri = f"{public_base(request)}/{workspace.slug}/_ui/oidc/callback"
    flow = signins.Flow(provider.name, nonce, verifier, redirect_uri)
    async with db.connection(request.app[state.POOL]) as conn:
        # each start stores a row: as many a minute per address as password logins
        await throttling.check(conn, throttling.LOGIN_PER_ADDRESS, request.remote or "unknown")
        async with db.committed(conn):
            state_value = await signins.start_flow(conn, workspace.tenant_id, flow)
    query = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(provider.scopes),
        "state": state_value,
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    location = doc["authorization_endpoint"] + "?" + urllib.parse.urlencode(query)
    raise web.HTTPFound(location, headers={"Cache-Control": "no-store"})


async def _token_request(provider: providers.Provider, endpoint: str, form: dict[str, str]) -> dict[str, Any]:
    """POST to the provider's token endpoint with client_secret_basic (RFC 6749 §2.3.1)."""
    secret = providers.client_secret(provider)
    headers = {"Accept": "application/json"}
    if secret is not None:
        quote = urllib.parse.quote
        pair = f"{quote(provider.client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form = {**form, "client_id": provider.client_id}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=keysets.FETCH_TIMEOUT)) as http,
            http.post(endpoint, data=form, headers=headers) as response,
        ):
            body = await response.json(content_type=None)
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise keysets.unavailable(
            f"the identity provider's token endpoint is unreachable: {exc!r}",
            code="SVC.AUTH.PROVIDER_UNAVAILABLE",
        ) from exc
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("id_token"), str):
        detail = body.get("error_description") or body.get("error") if isinstance(body, dict) else None
        raise errors.Unauthorized(
            f"the identity provider refused the grant: {detail or status}", code="SVC.AUTH.GRANT_REFUSED"
        )
    return body


def _session_answer(session: signins.Session, claims: dict[str, Any]) -> web.Response:
    data = {"token": session.id_token, "expires_at": claims["exp"], "provider": session.provider}
    return web.json_response({"data": data}, headers={"Cache-Control": "no-store"})


async def callback(request: web.Request) -> web.Response:
    workspace = await _workspace(request)
    query = request.query
    if "error" in query:
        raise errors.Unauthorized(
            f"the identity provider refused the sign-in: {query.get('error_description') or query['error']}",
            code="SVC.AUTH.PROVIDER_REFUSED",
        )
    code, state_value = query.get("code", ""), query.get("state", "")
    if not code or not state_value:
        raise errors.ValidationFailed("the callback needs code and state")
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        flow = await signins.take_flow(conn, workspace.tenant_id, state_value)
    if flow is None:
        raise errors.Forbidden(
            "this sign-in request is unknown, used already or expired: start again from the login page",
            code="SVC.AUTH.BAD_STATE",
        )
    provider = _provider(request, workspace.slug, flow.provider)
    keys = request.app[identity.KEYSETS]
    doc = await keys.discovery(provider)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": flow.redirect_uri,
        "code_verifier": flow.verifier,
    }
    tokens = await _token_request(provider, doc["token_endpoint"], form)
    claims = await keys.verify(provider, tokens["id_token"], audience=provider.client_id)
    if claims.get("nonce") != flow.nonce:
        raise errors.Unauthorized("the ID token's nonce is not this sign-in's", code="SVC.AUTH.BAD_NONCE")
    session = signins.Session(provider.name, tokens["id_token"], tokens.get("refresh_token"))
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        handle = await signins.open_session(conn, workspace.tenant_id, session)
    response = web.HTTPSeeOther(f"/{workspace.slug}/#/signed-in", headers={"Cache-Control": "no-store"})
    response.set_cookie(
        COOKIE,
        handle,
        path=_cookie_path(workspace.slug),
        httponly=True,
        samesite="Lax",
        secure=request.secure or public_base(request).startswith("https://"),
        max_age=signins.SESSION_TTL,
    )
    raise response


def _handle(request: web.Request) -> str:
    handle = request.cookies.get(COOKIE, "")
    if not handle:
        raise errors.Unauthorized("no provider session: sign in again", code="SVC.AUTH.NO_SESSION")
    return handle


async def _json_post(request: web.Request) -> Workspace:
    """The workspace of a session POST, which must carry a JSON body (no cross-site form can)."""
    workspace = await _workspace(request)
    await requests.read_json(request)
    return workspace


async def session(request: web.Request) -> web.Response:
    workspace = await _json_post(request)
    async with db.connection(request.app[state.POOL]) as conn:
        found = await signins.find_session(conn, workspace.tenant_id, _handle(request))
    if found is None:
        raise errors.Unauthorized("the provider session has ended: sign in again", code="SVC.AUTH.NO_SESSION")
    provider = _provider(request, workspace.slug, found.provider)
    claims = await request.app[identity.KEYSETS].verify(provider, found.id_token, audience=provider.client_id)
    return _session_answer(found, claims)


async def refresh(request: web.Request) -> web.Response:
    workspace = await _json_post(request)
    handle = _handle(request)
    async with db.connection(request.app[state.POOL]) as conn:
        found = await signins.find_session(conn, workspace.tenant_id, handle)
    if found is None or found.refresh_token is None:
        raise errors.Unauthorized(
            "the provider session cannot be renewed: sign in again", code="SVC.AUTH.NO_SESSION"
        )
    provider = _provider(request, workspace.slug, found.provider)
    keys = request.app[identity.KEYSETS]
    doc = await keys.discovery(provider)
    form = {"grant_type": "refresh_token", "refresh_token": found.refresh_token}
    tokens = await _token_request(provider, doc["token_endpoint"], form)
    claims = await keys.verify(provider, tokens["id_token"], audience=provider.client_id)
    renewed = signins.Session(
        provider.name, tokens["id_token"], tokens.get("refresh_token") or found.refresh_token
    )
    async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
        await signins.renew_session(conn, workspace.tenant_id, handle, renewed)
    return _session_answer(renewed, claims)


async def logout(request: web.Request) -> web.Response:
    workspace = await _json_post(request)
    ended: signins.Session | None = None
    handle = request.cookies.get(COOKIE, "")
    if handle:
        async with db.connection(request.app[state.POOL]) as conn, db.committed(conn):
            ended = await signins.end_session(conn, workspace.tenant_id, handle)
    end_url: str | None = None
    if ended is not None:
        provider = identity.declared(request.app, workspace.slug).get(ended.provider)
        if provider is not None:
            doc = await request.app[identity.KEYSETS].discovery(provider)
            endpoint = doc.get("end_session_endpoint")
            if isinstance(endpoint, str):
                back = f"{public_base(request)}/{workspace.slug}/"
                # client_id, not id_token_hint: the URL stays in the browser's history, and the
                # ID token would still open the API until it expires
                query = {"client_id": provider.client_id, "post_logout_redirect_uri": back}
                end_url = endpoint + "?" + urllib.parse.urlencode(query)
    response = web.json_response(
        {"data": {"end_session_url": end_url}}, headers={"Cache-Control": "no-store"}
    )
    response.del_cookie(COOKIE, path=_cookie_path(workspace.slug))
    return response


def check_declarations(catalog: Catalog) -> None:
    """Every workspace's providers parse; else ``ProviderRefused`` (a boot refusal) names the first.

    A catalog loaded from manifests has passed the same parse already (``dap.config.providers``,
    run by the manifests' validation on every path that loads them); this covers a catalog built
    in code, so ``create_server`` never serves a declaration it cannot use."""
    for spec in catalog.workspaces.values():
        if spec.auth is not None:
            providers.parse_all(spec.auth.providers)


async def _close(app: web.Application) -> None:
    await app[identity.KEYSETS].close()


def add_routes(app: web.Application, *, min_refresh: float = keysets.MIN_REFRESH) -> None:
    """The sign-in routes, and the process's provider key cache the API's ``identity`` uses."""
    app[identity.KEYSETS] = keysets.KeySets(min_refresh=min_refresh)
    app.on_cleanup.append(_close)
    app.router.add_get("/{ws}/_ui/providers", list_providers)
    app.router.add_get("/{ws}/_ui/oidc/callback", callback)
    app.router.add_get("/{ws}/_ui/oidc/{provider}/start", start)
    app.router.add_post("/{ws}/_ui/oidc/session", session)
    app.router.add_post("/{ws}/_ui/oidc/refresh", refresh)
    app.router.add_post("/{ws}/_ui/oidc/logout", logout)
