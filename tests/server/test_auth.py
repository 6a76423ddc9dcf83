"""JWT verification: the configured algorithm only, issuer, expiry, workspace claim; attacks refused."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from dap.server import errors
from dap.server.access import auth

from .conftest import ISSUER, SECRET, token


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": "u-1", "username": "alice", "iss": ISSUER, "iat": now, "exp": now + 600, **extra}


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


HS = auth.JwtVerifier(issuer=ISSUER, secret=SECRET)


def test_valid_token_gives_the_principal() -> None:
    principal = HS.verify(token(workspace="acme", attrs={"region": "north"}), workspace="acme")
    assert principal == auth.Principal(
        sub="u-1", username="alice", roles=("admin",), workspace="acme", attrs={"region": "north"}
    )
    assert HS.verify(token(), workspace="any").workspace is None  # no claim: any workspace


@pytest.mark.parametrize(
    ("make", "code"),
    [
        pytest.param(
            lambda: _b64({"alg": "none", "typ": "JWT"}) + "." + _b64(_claims()) + ".",
            "SVC.AUTH.INVALID_TOKEN",
            id="alg-none",
        ),
        pytest.param(
            lambda: jwt.encode(_claims(), "another-secret-another-secret-1234", algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="other-secret",
        ),
        pytest.param(
            lambda: jwt.encode(_claims(), SECRET, algorithm="HS512"),
            "SVC.AUTH.INVALID_TOKEN",
            id="other-hs-alg",
        ),
        pytest.param(lambda: token(ttl=-10), "SVC.AUTH.TOKEN_EXPIRED", id="expired"),
        pytest.param(lambda: token(issuer="evil"), "SVC.AUTH.BAD_ISSUER", id="wrong-issuer"),
        pytest.param(lambda: token(workspace="other"), "SVC.AUTH.WRONG_WORKSPACE", id="wrong-workspace"),
        pytest.param(
            lambda: jwt.encode({k: v for k, v in _claims().items() if k != "exp"}, SECRET, algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="no-exp",
        ),
        pytest.param(
            lambda: jwt.encode({k: v for k, v in _claims().items() if k != "iss"}, SECRET, algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="no-iss",
        ),
        pytest.param(lambda: token(roles="admin"), "SVC.AUTH.INVALID_TOKEN", id="roles-not-list"),
        pytest.param(lambda: "not.a.token", "SVC.AUTH.INVALID_TOKEN", id="garbage"),
        pytest.param(lambda: token()[:-4] + "AAAA", "SVC.AUTH.INVALID_TOKEN", id="tampered-signature"),
        pytest.param(lambda: token(sub=""), "SVC.AUTH.INVALID_TOKEN", id="empty-sub"),
        pytest.param(lambda: token(sub="   "), "SVC.AUTH.INVALID_TOKEN", id="blank-sub"),
        pytest.param(lambda: token(username=""), "SVC.AUTH.INVALID_TOKEN", id="empty-username"),
        pytest.param(lambda: token(sub=7), "SVC.AUTH.INVALID_TOKEN", id="numeric-sub"),
        pytest.param(
            lambda: jwt.encode({**_claims(), "exp": "9999999999"}, SECRET, algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="exp-as-string",
        ),
        pytest.param(
            lambda: jwt.encode({**_claims(), "exp": True}, SECRET, algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="exp-as-bool",
        ),
        pytest.param(
            lambda: jwt.encode({**_claims(), "nbf": int(time.time()) + 600}, SECRET, algorithm="HS256"),
            "SVC.AUTH.INVALID_TOKEN",
            id="not-yet-valid",
        ),
    ],
)
def test_hs256_attacks_are_refused(make: Any, code: str) -> None:
    with pytest.raises(errors.Unauthorized) as caught:
        HS.verify(make(), workspace="acme")
    assert caught.value.code == code
    assert caught.value.status == 401


@pytest.mark.parametrize("garbage", ["not.a.token", "\xff\xfe.\xff.\xff", "a" * 40, "e30.e30.e30"])
def test_a_malformed_token_is_named_without_the_decoders_internals(garbage: str) -> None:
    with pytest.raises(errors.Unauthorized) as caught:
        HS.verify(garbage, workspace="acme")
    message = str(caught.value)
    assert "codec" not in message and "byte" not in message and "padding" not in message
    assert caught.value.code == "SVC.AUTH.INVALID_TOKEN"


def test_rs256_and_algorithm_confusion(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = _public_pem(rsa_key)
    verifier = auth.JwtVerifier(issuer=ISSUER, public_key_pem=pem)
    assert verifier.algorithm == "RS256"
    assert not verifier.can_issue
    good = jwt.encode(_claims(), rsa_key, algorithm="RS256")
    assert verifier.verify(good, workspace="w").username == "alice"
    # confusion: an HS256 token "signed" with the public key as the shared secret
    forged = _hs256_with_key(pem)
    with pytest.raises(errors.Unauthorized):
        verifier.verify(forged, workspace="w")
    with pytest.raises(errors.NotImplementedHere):
        verifier.issue(sub="x", username="x", roles=[], workspace="w")


def _hs256_with_key(pem: str) -> str:
    import hashlib
    import hmac

    head = _b64({"alg": "HS256", "typ": "JWT"}) + "." + _b64(_claims())
    sig = hmac.new(pem.encode(), head.encode(), hashlib.sha256).digest()
    return head + "." + base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def test_es256() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    verifier = auth.JwtVerifier(issuer=ISSUER, public_key_pem=_public_pem(key))
    assert verifier.algorithm == "ES256"
    assert verifier.verify(jwt.encode(_claims(), key, algorithm="ES256"), workspace="w").sub == "u-1"


def test_bad_public_key_refuses_boot() -> None:
    with pytest.raises(errors.BootRefused):
        auth.JwtVerifier(
            issuer=ISSUER, public_key_pem="-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----"
        )


def test_issue_round_trip() -> None:
    issued = HS.issue(sub="id-1", username="bob", roles=["admin"], workspace="acme")
    principal = HS.verify(issued, workspace="acme")
    assert (principal.sub, principal.username, principal.roles) == ("id-1", "bob", ("admin",))


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("Basic abc", id="basic"),
        pytest.param("Bearer ", id="empty"),
    ],
)
def test_bearer_header(header: str | None) -> None:
    with pytest.raises(errors.Unauthorized):
        auth.bearer_token(header)


def test_cached_tokens_keep_every_check() -> None:
    verifier = auth.JwtVerifier(issuer=ISSUER, secret=SECRET)
    scoped = token(workspace="acme")
    assert verifier.verify(scoped, workspace="acme").workspace == "acme"
    with pytest.raises(errors.Unauthorized):
        verifier.verify(scoped, workspace="other")  # second use comes from the cache
    short = token(ttl=1)
    verifier.verify(short, workspace="w")
    time.sleep(1.1)
    with pytest.raises(errors.Unauthorized):
        verifier.verify(short, workspace="w")


def test_a_token_without_workspace_is_bound_to_the_urls_and_expires_with_it() -> None:
    verifier = auth.JwtVerifier(issuer=ISSUER, secret=SECRET)
    plain = token(ttl=1)
    first = verifier.verify(plain, workspace="acme", bind=True)
    assert first.workspace == "acme"
    assert verifier.verify(plain, workspace="acme", bind=True) is first  # kept, not rebuilt
    assert verifier.verify(plain, workspace="beta", bind=True).workspace == "beta"
    assert verifier.verify(plain, workspace="acme").workspace is None  # unbound unless asked
    time.sleep(1.1)
    with pytest.raises(errors.Unauthorized):  # the bound principal never outlives the token
        verifier.verify(plain, workspace="acme", bind=True)


def test_a_rotated_key_is_a_new_verifier_that_trusts_nothing_cached() -> None:
    old = auth.JwtVerifier(issuer=ISSUER, secret=SECRET)
    signed = token()
    old.verify(signed, workspace="w", bind=True)
    rotated = auth.JwtVerifier(
        issuer=ISSUER, secret="another-secret-another-secret-another-secret-0123456789abcdef"
    )
    with pytest.raises(errors.Unauthorized):
        rotated.verify(signed, workspace="w", bind=True)
