"""The pure parts of ``dap dev`` and ``dap token``: when a wait ends, where a spec's data lives,
what a token claims, what the banner promises. No processes; the sessions are in
test_sessions.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jwt
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dap import config, server
from dap.dev import banner, cli, control, data, running, tokens
from dap.resource_pod import backoff, converging, documents, errors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "procurement"


def _deployment(artifact_id: str, sha256: str) -> documents.Deployment:
    return {"workspace_id": "default", "artifact_id": artifact_id, "sha256": sha256, "cluster_id": None}


def _running(artifact_id: str, sha256: str) -> converging.Status:
    status = converging.fetched(converging.Status(), _deployment(artifact_id, sha256))
    status = converging.verified(status, "key")
    return converging.loaded(status, converging.Version(artifact_id, sha256, 1, "app"))


def test_a_wait_ends_when_the_same_content_runs_under_another_artifact() -> None:
    original = _running("art-original", "aaa")
    assert running.outcome(original, "art-original", "aaa") is running.Outcome.SERVED
    # a copy of the spec registers the same files as another app: the pod keeps what it runs
    copy = converging.up_to_date(original, _deployment("art-copy", "aaa"))
    assert running.outcome(copy, "art-copy", "aaa") is running.Outcome.SERVED
    assert running.outcome(original, "art-new", "bbb") is running.Outcome.PENDING


def test_a_wait_ends_when_that_artifact_failed_and_not_when_another_did() -> None:
    trying = converging.fetched(_running("art-1", "aaa"), _deployment("art-2", "bbb"))
    failed = converging.failed(trying, "load failed: …", now=0.0, policy=backoff.Backoff())
    assert running.outcome(failed, "art-2", "bbb") is running.Outcome.FAILED
    assert running.outcome(failed, "art-3", "ccc") is running.Outcome.PENDING


def test_each_spec_directory_has_its_own_place(tmp_path: Path) -> None:
    spec = tmp_path / "My Spec!"
    shutil.copytree(EXAMPLE, spec)
    shutil.copytree(EXAMPLE, tmp_path / "copy")
    here = data.place_for(spec, tmp_path / ".dap")
    assert here == data.place_for(tmp_path / "." / "My Spec!", tmp_path / ".dap"), "same directory"
    there = data.place_for(tmp_path / "copy", tmp_path / ".dap")
    assert here.database != there.database and here.pod_state != there.pod_state
    assert here.database.startswith("dev_my_spec_") and len(here.database) <= 63
    assert here.database.replace("_", "").isalnum() and here.database.islower()
    assert here.pod_state.is_relative_to(tmp_path / ".dap" / "specs")


def test_parse_attrs_takes_json_values_and_plain_strings() -> None:
    assert tokens.parse_attrs(["region=north", "limit=5", "ok=true", "tags=[1, 2]", "eq=a=b"]) == {
        "region": "north",
        "limit": 5,
        "ok": True,
        "tags": [1, 2],
        "eq": "a=b",
    }
    with pytest.raises(errors.ConfigError, match="KEY=VALUE"):
        tokens.parse_attrs(["region"])


def _token(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli.token, list(args))
    assert result.exit_code == 0, result.output
    text = result.output.strip()
    assert "\n" not in text, "only the token on stdout: export T=$(dap token) must work"
    claims: dict[str, Any] = jwt.decode(text, tokens.DEV_SECRET, algorithms=["HS256"], issuer="svc")
    return claims


def test_dap_token_makes_the_claims_dap_dev_accepts() -> None:
    claims = _token()
    assert (claims["sub"], claims["roles"], claims["workspace"]) == ("dev", ["admin"], "default")
    assert claims["exp"] - claims["iat"] == 24 * 3600
    claims = _token(
        *("--role", "buyer", "--role", "finance", "--username", "bob", "--attr", "region=north"),
        *("--workspace", "acme", "--ttl", "15m"),
    )
    assert claims["roles"] == ["buyer", "finance"] and claims["attrs"] == {"region": "north"}
    assert (claims["username"], claims["sub"], claims["workspace"]) == ("bob", "bob", "acme")
    assert claims["exp"] - claims["iat"] == 900
    assert "workspace" not in _token("--workspace", ""), "empty: a token for any workspace"


def test_dap_token_signs_with_a_private_key(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    result = CliRunner().invoke(cli.token, ["--private-key", str(pem)])
    assert result.exit_code == 0, result.output
    assert jwt.get_unverified_header(result.output.strip())["alg"] == "RS256"
    claims = jwt.decode(result.output.strip(), key.public_key(), algorithms=["RS256"], issuer="svc")
    assert claims["roles"] == ["admin"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--ttl", "soon"], "--ttl", id="bad-ttl"),
        pytest.param(["--ttl", "0s"], "positive", id="zero-ttl"),
        pytest.param(["--attr", "x"], "KEY=VALUE", id="bad-attr"),
    ],
)
def test_dap_token_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.token, args)
    assert result.exit_code == 2 and message in result.output, result.output


def _banner(web_dir: Path | None, status: dict[str, Any]) -> str:
    catalog = server.Catalog.from_spec(config.load_spec(EXAMPLE))
    lines = banner.render(
        workspace="default",
        base="http://127.0.0.1:8080",
        web_dir=web_dir,
        status=status,
        catalog=catalog,
        control_url="http://127.0.0.1:8443",
        admin=None,
        admin_secret="x",
        data="database dev_x",
        watch=False,
    )
    return "\n".join(lines)


SERVING = {"artifact_id": "art-1", "version": 1, "phase": "up_to_date"}


def test_the_banner_promises_only_what_answers(tmp_path: Path) -> None:
    text = _banner(None, SERVING)
    assert "API only (no UI bundle found)" in text
    assert "http://127.0.0.1:8080/default/ " not in text and not text.count("8080/default/\n")
    assert "http://127.0.0.1:8080/default/api/" in text and "curl -s -X POST" in text
    assert "UI at http://127.0.0.1:8080/default/" in _banner(tmp_path, SERVING)
    nothing = _banner(None, {"artifact_id": None, "version": None, "phase": "failed"})
    assert "serving nothing yet" in nothing and "curl" not in nothing
    assert "roles of this spec: buyer, buying_manager, cfo, finance" in text
    assert "token --role buyer --username alice" in text
    failed = _banner(None, {**SERVING, "phase": "failed"})
    assert "still serving the previous version 1" in failed


def test_dev_helpers(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("x")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "c.pyc").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text("y")
    assert running.collect(tmp_path) == {"a.yaml": b"x", "sub/b.yml": b"y"}
    before = running.fingerprint(tmp_path)
    (tmp_path / "sub" / "b.yml").write_text("yy")
    assert running.fingerprint(tmp_path) != before
    claims = jwt.decode(tokens.dev_token("default"), tokens.DEV_SECRET, algorithms=["HS256"], issuer="svc")
    assert claims["workspace"] == "default" and claims["roles"] == ["admin"]
    key = control.signing_key(tmp_path / "k" / "signing.key")
    assert len(key.read_text().strip()) == 64 and (key.stat().st_mode & 0o777) == 0o600
    assert control.signing_key(key).read_text() == key.read_text(), "created once, then reused"
