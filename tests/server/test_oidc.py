"""Provider tokens at the API, against an issuer on loopback whose keys the test holds.

A dap server (in process) serves the shop spec with a workspace declaring one provider, the
issuer of ``oidc_issuer``; its discovery document and JWKS are real HTTP on loopback. Covered:
claims mapped to roles (a mapped group may write, an unmapped one may not) and to attributes;
the provider named in the audit trail; a rotated key accepted without restart (and the old one
refused); RS256, ES256 and EdDSA; tokens of another issuer, of another audience, expired, with
``alg: none``, forged with the right ``kid`` or an HMAC algorithm refused; made-up ``kid`` values
do not make the server refetch the key set faster than its floor, nor does a failing provider
(its discovery or key set answering 500); two workspaces declaring the same issuer each keep
their own algorithms and leeway, cached tokens included.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import jwt
import pytest

from dap import config
from dap.config.platform import WorkspaceSpec
from dap.server import identity, state
from dap.server.access import providers, signins
from dap.server.catalog import Catalog
from dap.server.rpc import server as rpc_server
from dap.server.web import app

from .conftest import SHOP, Running, running, serve_options
from .oidc_issuer import Issuer
from .protocols_clients import Grpc

PRODUCT = {"value": "gold"}
# an entity whose create needs a permission, and the role that holds it (mapped from "staff")
VAULT = {
    "shop/vault.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: vault, module: shop}
spec:
  fields:
    - {name: value, type: string, audited: true}
  actions:
    - {name: create, required_permission: shop.vault.create, audit: true}
  expose: [{type: rest}, {type: grpc}]
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: keeper}
spec:
  permissions: [shop.vault.create]
""",
}


def _workspace(issuer_url: str, name: str = "default", extra: str = "") -> str:
    """A Workspace manifest declaring the provider ``corp`` (``extra``: more keys of it)."""
    return f"""
apiVersion: dap.io/v1
kind: Workspace
metadata: {{name: {name}}}
spec:
  title: Shop
  auth:
    providers:
      corp:
        title: Corp sign-in
        issuer: {issuer_url}
        client_id: dap
        roles_claim: groups
        roles: {{staff: [keeper]}}
        attributes: {{team: team}}
{extra}"""


def _catalog(issuer_url: str, *workspaces: str) -> Catalog:
    documents = "\n---\n".join(workspaces or (_workspace(issuer_url),))
    return Catalog.from_spec(config.load_files({**SHOP, **VAULT, "workspace.yaml": documents}))


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    found = Issuer()
    await found.start()
    try:
        yield found
    finally:
        await found.stop()


@pytest.fixture
async def srv(pg_dsn: str, issuer: Issuer) -> AsyncIterator[Running]:
    async with running(pg_dsn, _catalog(issuer.url)) as running_server:
        yield running_server


async def _call(
    srv: Running, token: str, method: str = "GET", body: Any = None, ws: str = "default"
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{srv.api}/{ws}/api/shop/vault"
    async with srv.http.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def _code(answer: Any) -> str:
    return str(answer.get("code", "")) if isinstance(answer, dict) else ""


async def test_mapped_roles_write_unmapped_do_not_and_the_trail_names_the_provider(
    srv: Running, issuer: Issuer
) -> None:
    staff = issuer.token(sub="ann", groups=["staff"], preferred_username="ann", team="blue")
    status, answer = await _call(srv, staff, "POST", PRODUCT)
    assert status == 201, answer
    record = answer["data"]["id"]
    guest = issuer.token(
        sub="bob", groups=["guests"], roles=["admin"]
    )  # a token's own roles count for nothing
    status, answer = await _call(srv, guest, "POST", PRODUCT)
    assert status == 403, answer
    url = f"{srv.api}/default/api/shop/vault/{record}/_audit"
    async with srv.http.get(url, headers={"Authorization": f"Bearer {staff}"}) as resp:
        trail = await resp.json()
    assert resp.status == 200, trail
    entry = trail["data"][0]
    assert entry["actor"] == {"sub": "corp:ann", "username": "ann"}, entry


async def test_a_provider_token_opens_the_same_doors_over_grpc(pg_dsn: str, issuer: Issuer) -> None:
    # one check of who calls (``identity``) under every protocol: the mapped group may create
    # over gRPC as over REST, the unmapped one is refused with the same code
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), _catalog(issuer.url))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as channel:
            assert rpc.pool is not None
            client = Grpc(channel, rpc.pool, package="dap.shop.v1")
            staff = issuer.token(sub="ann", groups=["staff"], preferred_username="ann")
            code, data = await client.create("vault", PRODUCT, f"Bearer {staff}")
            assert code == "ok" and data is not None and data["value"] == "gold", (code, data)
            guest = issuer.token(sub="bob", groups=["guests"])
            assert (await client.create("vault", PRODUCT, f"Bearer {guest}"))[0] == "SVC.AUTH.FORBIDDEN"
    finally:
        await server.stop()


async def test_a_rotated_key_is_taken_without_restart(srv: Running, issuer: Issuer) -> None:
    keys = srv.server.app[identity.KEYSETS]
    keys.min_refresh = 0.0
    before = issuer.token(groups=["staff"])
    assert (await _call(srv, before))[0] == 200
    fetched = issuer.jwks_requests
    for alg in ("ES256", "EdDSA", "RS256"):
        issuer.rotate(alg)
        status, answer = await _call(srv, issuer.token(groups=["staff"]))
        assert status == 200, (alg, answer)
    assert issuer.jwks_requests == fetched + 3  # one refetch per new kid, none per request
    status, answer = await _call(srv, before)  # its key is no longer published
    assert status == 401 and _code(answer) == "SVC.AUTH.UNKNOWN_KEY", answer


async def test_made_up_kids_do_not_hammer_the_provider(srv: Running, issuer: Issuer) -> None:
    srv.server.app[identity.KEYSETS].min_refresh = 60.0
    assert (await _call(srv, issuer.token(groups=["staff"])))[0] == 200
    fetched = issuer.jwks_requests
    for n in range(5):
        forged = jwt.encode(
            {
                "iss": issuer.url,
                "sub": "x",
                "aud": "dap",
                "iat": int(time.time()),
                "exp": int(time.time()) + 60,
            },
            issuer.key,
            algorithm=issuer.alg,
            headers={"kid": f"made-up-{n}"},
        )
        status, answer = await _call(srv, forged)
        assert status == 401 and _code(answer) == "SVC.AUTH.UNKNOWN_KEY", answer
    assert issuer.jwks_requests == fetched


def _made_up_kid(issuer: Issuer, n: int) -> str:
    now = int(time.time())
    claims = {"iss": issuer.url, "sub": "x", "aud": "dap", "iat": now, "exp": now + 60}
    return jwt.encode(claims, issuer.key, algorithm=issuer.alg, headers={"kid": f"made-up-{n}"})


@pytest.mark.parametrize(
    ("failing", "asked", "started"),
    [
        pytest.param("jwks_status", {"discovery_requests": 1, "jwks_requests": 1}, 302, id="key-set-500"),
        pytest.param(
            "discovery_status", {"discovery_requests": 1, "jwks_requests": 0}, 503, id="discovery-500"
        ),
    ],
)
async def test_a_failing_provider_is_asked_once_per_interval(
    srv: Running, issuer: Issuer, failing: str, asked: dict[str, int], started: int
) -> None:
    # a failed fetch counts against the floor as a successful one does: 50 tokens with made-up
    # kids (at once, then one by one) and a sign-in start ask a failing provider once, and each
    # is told the provider is unavailable (503), not that the token is bad; a start needs only
    # the discovery document, so it still redirects while the key set alone fails
    keys = srv.server.app[identity.KEYSETS]
    keys.min_refresh = 60.0
    setattr(issuer, failing, 500)
    answers = await asyncio.gather(*(_call(srv, _made_up_kid(issuer, n)) for n in range(25)))
    answers += [await _call(srv, _made_up_kid(issuer, n)) for n in range(25, 50)]
    assert {(status, _code(answer)) for status, answer in answers} == {
        (503, "SVC.AUTH.PROVIDER_UNAVAILABLE")
    }, answers[:3]
    async with srv.http.get(f"{srv.api}/default/_ui/oidc/corp/start", allow_redirects=False) as resp:
        assert resp.status == started, await resp.text()
        assert started != 503 or resp.headers.get("Retry-After")
    asked_now = {name: getattr(issuer, name) for name in asked}
    assert asked_now == asked
    # once the interval has passed, the next request asks again and the recovered provider serves
    setattr(issuer, failing, 200)
    keys.min_refresh = 0.2
    await asyncio.sleep(0.3)
    status, answer = await _call(srv, issuer.token(groups=["staff"]))
    assert status == 200, answer


async def test_a_sign_in_start_does_not_hold_back_the_first_key_fetch(srv: Running, issuer: Issuer) -> None:
    # the floor is per document: a start fetches only the discovery document, and the callback's
    # ID token, a second later, needs the key set at once (Dex's code flow found this)
    srv.server.app[identity.KEYSETS].min_refresh = 60.0
    async with srv.http.get(f"{srv.api}/default/_ui/oidc/corp/start", allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
    status, answer = await _call(srv, issuer.token(groups=["staff"]))
    assert status == 200, answer
    assert (issuer.discovery_requests, issuer.jwks_requests) == (1, 1)


@pytest.mark.parametrize(
    ("strict", "lenient", "not_before", "code"),
    [
        pytest.param(
            "        algorithms: [ES256]",
            "        algorithms: [RS256]",
            None,
            "SVC.AUTH.BAD_ALGORITHM",
            id="algorithms",
        ),
        pytest.param(
            "        leeway: 0",
            "        leeway: 120",
            60,  # valid in 60 s: inside a 120 s leeway, outside none
            "SVC.AUTH.INVALID_TOKEN",
            id="leeway",
        ),
    ],
)
async def test_each_workspace_applies_its_own_declaration_to_cached_tokens(
    pg_dsn: str, issuer: Issuer, strict: str, lenient: str, not_before: int | None, code: str
) -> None:
    # two workspaces trust the same issuer with different rules: a token the lenient one accepted
    # (and so remembers) is still refused by the strict one, before and after, and writes nothing
    catalog = _catalog(
        issuer.url, _workspace(issuer.url, "default", strict), _workspace(issuer.url, "other", lenient)
    )
    async with running(pg_dsn, catalog) as srv:
        await srv.register("other")
        before = await _stored(srv)
        claims = {} if not_before is None else {"nbf": int(time.time()) + not_before}
        token = issuer.token(groups=["staff"], **claims)
        status, answer = await _call(srv, token)
        assert (status, _code(answer)) == (401, code), answer
        status, answer = await _call(srv, token, ws="other")
        assert status == 200, answer
        status, answer = await _call(srv, token)
        assert (status, _code(answer)) == (401, code), answer
        status, answer = await _call(srv, token, "POST", PRODUCT)
        assert (status, _code(answer)) == (401, code), answer
        assert await _stored(srv) == before


async def _stored(srv: Running) -> list[str]:
    """The ids of the vault records of ``default``, read with a local admin's token."""
    url = f"{srv.api}/default/api/shop/vault?limit=1000"
    async with srv.http.get(url, headers=srv.auth()) as resp:
        listed = await resp.json()
        assert resp.status == 200, listed
    return sorted(record["id"] for record in listed["data"])


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


async def test_foreign_expired_and_unsigned_tokens_are_refused(srv: Running, issuer: Issuer) -> None:
    assert (await _call(srv, issuer.token(groups=["staff"])))[0] == 200
    other = Issuer()
    await other.start()
    try:
        status, answer = await _call(srv, other.token(groups=["staff"]))  # an issuer not declared
        assert status == 401, answer
    finally:
        await other.stop()
    status, answer = await _call(srv, issuer.token(aud="another-client", groups=["staff"]))
    assert status == 401 and _code(answer) == "SVC.AUTH.BAD_AUDIENCE", answer
    status, answer = await _call(srv, issuer.token(ttl=-120, groups=["staff"]))  # past the 30 s leeway
    assert status == 401 and _code(answer) == "SVC.AUTH.TOKEN_EXPIRED", answer
    now = int(time.time())
    claims = {"iss": issuer.url, "sub": "x", "aud": "dap", "iat": now, "exp": now + 60, "groups": ["staff"]}
    unsigned = f"{_b64({'alg': 'none', 'kid': issuer.kid})}.{_b64(claims)}."
    status, answer = await _call(srv, unsigned)
    assert status == 401 and _code(answer) == "SVC.AUTH.BAD_ALGORITHM", answer
    hmac = jwt.encode(
        claims, "a-public-key-is-no-secret-at-all-32b", algorithm="HS256", headers={"kid": issuer.kid}
    )
    status, answer = await _call(srv, hmac)
    assert status == 401 and _code(answer) == "SVC.AUTH.BAD_ALGORITHM", answer
    stranger = Issuer()  # the right kid, another key
    forged = jwt.encode(claims, stranger.key, algorithm="RS256", headers={"kid": issuer.kid})
    status, answer = await _call(srv, forged)
    assert status == 401 and _code(answer) == "SVC.AUTH.INVALID_TOKEN", answer
    future = issuer.token(groups=["staff"], nbf=now + 600)
    status, answer = await _call(srv, future)
    assert status == 401, answer


def test_declarations_are_checked() -> None:
    ok = providers.parse("corp", {"issuer": "https://id.example", "client_id": "dap"})
    assert ok.audience == "dap" and ok.algorithms == providers.ALGORITHMS
    for raw, words in (
        ({"issuer": "http://id.example", "client_id": "dap"}, "https"),
        ({"issuer": "https://id.example"}, "client_id"),
        ({"issuer": "https://id.example", "client_id": "d", "leeway": 3600}, "leeway"),
        ({"issuer": "https://id.example", "client_id": "d", "algorithms": ["HS256"]}, "algorithms"),
        ({"issuer": "https://id.example", "client_id": "d", "scopes": ["email"]}, "openid"),
        ({"issuer": "https://id.example", "client_id": "d", "secret": "x"}, "unknown keys"),
    ):
        with pytest.raises(providers.ProviderRefused, match=words):
            providers.parse("corp", raw)


def test_claims_map_to_roles_and_attributes() -> None:
    corp = providers.parse(
        "corp",
        {
            "issuer": "https://id.example",
            "client_id": "dap",
            "roles_claim": "groups",
            "roles": {"approvers": ["finance", "buyer"], "buyers": ["buyer"]},
            "attributes": {"region": "office"},
        },
    )
    who = providers.principal(
        corp,
        {"sub": "7", "email": "a@x", "groups": ["buyers", "approvers", "admin"], "office": "north"},
        workspace="w",
    )
    assert who.sub == "corp:7" and who.username == "a@x"
    assert who.roles == ("buyer", "finance")  # "admin" is not mapped, so not granted
    assert who.attrs == {"region": "north", "provider": "corp"}


async def test_a_wrong_declaration_refuses_the_boot(pg_dsn: str) -> None:
    # the manifests' validation refuses it (dap validate, dap serve, a pod's load: the same rule) ...
    with pytest.raises(config.SpecError, match=r"spec\.auth\.providers\.corp\.issuer: .*https"):
        _catalog("http://id.example.com")
    # ... and so does create_server, for a catalog built without the loader
    bare = WorkspaceSpec.model_validate(
        {"auth": {"providers": {"corp": {"issuer": "http://id.example.com", "client_id": "dap"}}}}
    )
    with pytest.raises(providers.ProviderRefused, match="https"):
        async with running(pg_dsn, Catalog.build({}, workspaces={"default": bare})):
            pass


async def test_sign_out_ends_the_session_and_points_at_the_providers_logout(
    srv: Running, issuer: Issuer
) -> None:
    app = srv.server.app
    workspace = await app[state.REGISTRY].resolve("default")
    async with app[state.POOL].acquire() as conn:
        session = signins.Session("corp", issuer.token(groups=["staff"]), None)
        handle = await signins.open_session(conn, workspace.tenant_id, session)
    cookie = {"Cookie": f"dap_oidc={handle}"}
    async with srv.http.post(f"{srv.api}/default/_ui/oidc/session", json={}, headers=cookie) as resp:
        assert resp.status == 200 and (await resp.json())["data"]["token"] == session.id_token
    async with srv.http.post(f"{srv.api}/default/_ui/oidc/session", data="x", headers=cookie) as resp:
        assert resp.status in (400, 415, 422), "a session POST needs a JSON body (no cross-site form)"
    async with srv.http.post(f"{srv.api}/default/_ui/oidc/logout", json={}, headers=cookie) as resp:
        ended = await resp.json()
        assert resp.status == 200, ended
    url = ended["data"]["end_session_url"]
    assert url.startswith(f"{issuer.url}/logout?") and "client_id=dap" in url, url
    assert "post_logout_redirect_uri=" in url and session.id_token not in url
    async with srv.http.post(f"{srv.api}/default/_ui/oidc/session", json={}, headers=cookie) as resp:
        assert resp.status == 401
