"""Pure parts: canonical JSON, signatures, key files, hashes, envelopes, snapshots, packing."""

from __future__ import annotations

import base64
import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dap.config import canonical
from dap.control import errors
from dap.control.artifacts import packing
from dap.control.trust import envelopes, signing, snapshots


def test_canonical_json_is_sorted_compact_utf8() -> None:
    assert signing.canonical_json({"b": 1, "a": {"é": [1, "x"]}}) == '{"a":{"é":[1,"x"]},"b":1}'.encode()


def test_sign_and_verify_and_failures() -> None:
    signer = signing.Signer.generate()
    doc = signer.sign({"x": 1, "signature": "whatever"})
    trusted = {signer.key_id: signer.public_key}
    assert signing.verify(doc, trusted) == signer.key_id
    assert doc["signing_key_id"] == hashlib.sha256(signer.public_key).hexdigest()[:16]
    with pytest.raises(errors.SignatureError):
        signing.verify({**doc, "x": 2}, trusted)
    with pytest.raises(errors.SignatureError, match="not trusted"):
        signing.verify(doc, {})
    flipped = bytearray(bytes.fromhex(doc["signature"]))
    flipped[5] ^= 0x80
    with pytest.raises(errors.SignatureError):
        signing.verify({**doc, "signature": flipped.hex()}, trusted)
    with pytest.raises(errors.SignatureError):
        signing.verify({**doc, "signature": "zz"}, trusted)


def test_key_file_round_trip(tmp_path: Path) -> None:
    signer = signing.Signer.generate()
    path = tmp_path / "key"
    signer.save(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert signing.Signer.load(path).public_key == signer.public_key
    with pytest.raises(FileExistsError):
        signer.save(path)
    path.write_text("abc")
    with pytest.raises(errors.SigningKeyError):
        signing.Signer.load(path)
    with pytest.raises(errors.SigningKeyError):
        signing.Signer.load(tmp_path / "missing")


@given(
    st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda p: "\0" not in p), st.binary(max_size=64))
)
def test_aggregate_is_order_independent_and_content_sensitive(files: dict[str, bytes]) -> None:
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    reversed_hashes = dict(reversed(list(hashes.items())))
    assert canonical.aggregate_sha256(hashes) == canonical.aggregate_sha256(reversed_hashes)
    if files:
        path = next(iter(files))
        changed = {**hashes, path: canonical.file_sha256(files[path] + b"!")}
        assert canonical.aggregate_sha256(changed) != canonical.aggregate_sha256(hashes)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        pytest.param("a/b.yaml", "a/b.yaml", id="plain"),
        pytest.param("./a//b.yaml", "a/b.yaml", id="dots-and-doubles"),
        pytest.param("a\\b.yaml", "a/b.yaml", id="backslash"),
    ],
)
def test_normalise_path(raw: str, clean: str) -> None:
    assert envelopes.normalise_path(raw) == clean


@pytest.mark.parametrize("raw", ["/etc/passwd", "../x", "a/../../x", "", "."])
def test_normalise_path_refuses(raw: str) -> None:
    with pytest.raises(errors.RequestError):
        envelopes.normalise_path(raw)


def _envelope(signer: signing.Signer) -> envelopes.Envelope:
    files = {"a.yaml": b"x: 1\n", "b/c.bin": b"\x00\x01"}
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    return envelopes.build(
        app="shop",
        version=3,
        files=files,
        file_hashes=hashes,
        sha256=canonical.aggregate_sha256(hashes),
        prev_version=2,
        prev_sha256="f" * 64,
        created_at="2026-01-01T00:00:00Z",
        signer=signer,
    )


def test_envelope_verification_detects_tampering() -> None:
    signer = signing.Signer.generate()
    envelope = _envelope(signer)
    trusted = {signer.key_id: signer.public_key}
    assert envelopes.verify(envelope, trusted) == {"a.yaml": b"x: 1\n", "b/c.bin": b"\x00\x01"}
    bad_content = {
        **envelope,
        "files": [
            {**envelope["files"][0], "content": base64.b64encode(b"x: 2\n").decode()},
            envelope["files"][1],
        ],
    }
    with pytest.raises(errors.SignatureError):
        envelopes.verify(bad_content, trusted)
    # The hash check alone (no signature involved) catches the changed content too.
    with pytest.raises(errors.SignatureError):
        envelopes.decode_files(bad_content)
    other = signing.Signer.generate()
    with pytest.raises(errors.SignatureError):
        envelopes.verify(envelope, {signer.key_id: other.public_key})


def test_snapshot_etag_matching_and_reissue() -> None:
    issued = datetime(2026, 1, 1, tzinfo=UTC)
    state = snapshots.State(version=7, issued_at=issued, ttl=timedelta(hours=1), environment="production")
    assert state.etag == f'"7.{int(issued.timestamp())}"'
    assert snapshots.etag_matches(state.etag, state.etag)
    assert snapshots.etag_matches(f'"1.1", W/{state.etag}', state.etag)
    assert snapshots.etag_matches("*", state.etag)
    assert not snapshots.etag_matches('"6.1"', state.etag)
    assert not snapshots.etag_matches(None, state.etag)
    assert not state.needs_reissue(issued + timedelta(minutes=29))
    assert state.needs_reissue(issued + timedelta(minutes=30))
    doc = snapshots.document(state, [])
    assert doc["expires_at"] == "2026-01-01T01:00:00Z"


def test_packing_honours_dapignore(tmp_path: Path) -> None:
    (tmp_path / "buying").mkdir()
    (tmp_path / "buying" / "m.yaml").write_bytes(b"m")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "x.js").write_bytes(b"x")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "logo.psd").write_bytes(b"big")
    (tmp_path / "assets" / "logo.png").write_bytes(b"png")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_bytes(b"ref")
    (tmp_path / "a.pyc").write_bytes(b"c")
    (tmp_path / ".dapignore").write_text("# build output\nnode_modules/\nassets/*.psd\n*.pyc\n")
    assert sorted(packing.collect(tmp_path)) == ["assets/logo.png", "buying/m.yaml"]
