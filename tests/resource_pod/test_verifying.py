"""The pod's verifier on its own: keys, signatures, hashes, snapshot binding, rollback, freeze.

Documents are signed here with PyNaCl directly (the control plane's signer is exercised in
``test_contract.py``), so these tests pin the pod's rules without any other dap package.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import nacl.signing
import pytest

from dap.resource_pod import documents, errors, verifying

KEY = nacl.signing.SigningKey(bytes(range(32)))
PUBLIC = bytes(KEY.verify_key)
TRUSTED = {verifying.key_id(PUBLIC): PUBLIC}
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def sign(document: dict[str, Any], key: nacl.signing.SigningKey = KEY) -> dict[str, Any]:
    unsigned = {**document, "signing_key_id": verifying.key_id(bytes(key.verify_key)), "signature": ""}
    signature = key.sign(verifying.signing_message(unsigned)).signature.hex()
    return {**unsigned, "signature": signature}


def envelope(files: dict[str, bytes], version: int = 1) -> dict[str, Any]:
    hashes = {p: hashlib.sha256(c).hexdigest() for p, c in files.items()}
    aggregate = verifying.aggregate_sha256(hashes)
    return sign(
        {
            "artifact_id": verifying.artifact_id_for("app", version, aggregate),
            "app": "app",
            "version": version,
            "sha256": aggregate,
            "files": [
                {"path": p, "sha256": hashes[p], "content": base64.b64encode(c).decode()}
                for p, c in files.items()
            ],
            "prev_version": None,
            "prev_sha256": None,
            "created_at": "2030-01-01T00:00:00Z",
        }
    )


def binding(env: dict[str, Any]) -> documents.Deployment:
    return {
        "workspace_id": "w",
        "artifact_id": env["artifact_id"],
        "sha256": env["sha256"],
        "cluster_id": None,
    }


def snapshot(
    version: int, *, expires: datetime = NOW + timedelta(hours=1), deployments: list[Any] | None = None
) -> dict[str, Any]:
    return sign(
        {
            "version": version,
            "issued_at": "2030-01-01T11:00:00Z",
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "environment": "test",
            "deployments": deployments or [],
        }
    )


def test_trusted_keys_parse_comma_and_space_separated_hex() -> None:
    other = bytes(nacl.signing.SigningKey.generate().verify_key)
    keys = verifying.trusted_keys([f"{PUBLIC.hex()}, {other.hex()}", ""])
    assert keys == {verifying.key_id(PUBLIC): PUBLIC, verifying.key_id(other): other}
    assert len(verifying.key_id(PUBLIC)) == 16


@pytest.mark.parametrize("bad", [pytest.param("zz" * 32, id="not-hex"), pytest.param("ab" * 31, id="short")])
def test_a_bad_trusted_key_is_a_config_error(bad: str) -> None:
    with pytest.raises(errors.ConfigError, match="trusted key"):
        verifying.trusted_keys([bad])


def test_a_valid_envelope_gives_its_files() -> None:
    env = envelope({"a.yaml": b"a", "b/c.yaml": b"c"})
    artifact = verifying.verify_envelope(env, TRUSTED, binding(env))
    assert dict(artifact.files) == {"a.yaml": b"a", "b/c.yaml": b"c"}


def test_an_unknown_key_is_refused() -> None:
    env = sign(envelope({"a": b"a"}), nacl.signing.SigningKey.generate())
    with pytest.raises(errors.SignatureInvalid, match="not among the pod's trusted keys"):
        verifying.verify_envelope(env, TRUSTED, binding(env))


def test_a_missing_signature_is_refused() -> None:
    env = {**envelope({"a": b"a"}), "signature": ""}
    with pytest.raises(errors.SignatureInvalid, match="no signing_key_id or signature"):
        verifying.verify_envelope(env, TRUSTED, binding(env))


def test_hashes_are_checked_even_when_the_signature_holds() -> None:
    # a control plane bug (or a stolen key) that signs inconsistent hashes is still caught
    env = envelope({"a": b"a"})
    env["files"][0]["content"] = base64.b64encode(b"b").decode()
    with pytest.raises(errors.SignatureInvalid, match="does not match its sha256"):
        verifying.verify_envelope(sign(env), TRUSTED, binding(env))
    env = envelope({"a": b"a"})
    env["files"].append({"path": "x", "sha256": hashlib.sha256(b"x").hexdigest(), "content": "eA=="})
    with pytest.raises(errors.SignatureInvalid, match="aggregate"):
        verifying.verify_envelope(sign(env), TRUSTED, binding(env))


def test_the_envelope_must_be_the_one_the_snapshot_names() -> None:
    old, new = envelope({"a": b"1"}, version=1), envelope({"a": b"2"}, version=2)
    with pytest.raises(errors.SignatureInvalid, match="sent artifact"):
        verifying.verify_envelope(old, TRUSTED, binding(new))
    forged_binding = {**binding(new), "artifact_id": old["artifact_id"]}
    with pytest.raises(errors.SignatureInvalid, match="the snapshot names"):
        verifying.verify_envelope(old, TRUSTED, forged_binding)  # type: ignore[arg-type]


def test_a_signed_but_malformed_envelope_is_refused() -> None:
    with pytest.raises(errors.SignatureInvalid, match="'files'"):
        verifying.verify_envelope(
            sign({"artifact_id": "x", "app": "a", "version": 1, "sha256": "s"}), TRUSTED, {}
        )  # type: ignore[typeddict-item]


def test_snapshot_rollback_and_freeze() -> None:
    assert verifying.verify_snapshot(snapshot(5), TRUSTED, running_version=5, now=NOW)["version"] == 5
    assert verifying.verify_snapshot(snapshot(6), TRUSTED, running_version=None, now=NOW)["version"] == 6
    with pytest.raises(errors.RollbackRefused, match="lower than the running version 5") as rollback:
        verifying.verify_snapshot(snapshot(4), TRUSTED, running_version=5, now=NOW)
    assert rollback.value.kind == "rollback"
    stale = snapshot(5, expires=NOW - timedelta(minutes=5))
    with pytest.raises(errors.SnapshotExpired, match="expired") as freeze:
        verifying.verify_snapshot(stale, TRUSTED, running_version=5, now=NOW)
    assert freeze.value.kind == "freeze"
    # within the clock-skew allowance it is still accepted
    verifying.verify_snapshot(
        snapshot(5, expires=NOW - timedelta(seconds=10)), TRUSTED, running_version=5, now=NOW
    )


def test_an_unsigned_snapshot_is_a_signature_violation_whatever_it_claims() -> None:
    forged = {**snapshot(1), "version": 99}
    with pytest.raises(errors.SignatureInvalid) as caught:
        verifying.verify_snapshot(forged, TRUSTED, running_version=5, now=NOW)
    assert caught.value.kind == "signature"


def test_json_object_translates_garbage_into_protocol_errors() -> None:
    with pytest.raises(errors.ProtocolError, match="not JSON"):
        documents.json_object(b"<html>", "snapshot")
    with pytest.raises(errors.ProtocolError, match="not a JSON object"):
        documents.json_object(b"[1]", "snapshot")
