"""The pod's verifier against the control plane's signer: one contract, two implementations.

``dap.resource_pod`` may not import ``dap.control`` (import-linter), so it re-implements the
verifying half of the contract. These tests sign with the control plane's real code and verify
with the pod's, and build evidence with the pod's code and validate it with the control plane's,
so that a change on either side fails here instead of in production.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dap.config import canonical
from dap.control import errors as control_errors
from dap.control.evidence import models as control_evidence
from dap.control.trust import envelopes, signing, snapshots
from dap.resource_pod import converging, documents, errors, evidence, verifying

FILES = {
    "buying/module.yaml": b"apiVersion: dap.io/v1\nkind: Module\n",
    "buying/supplier.yaml": "title: Lieferant — Größe\n".encode(),
    "z/ü.txt": b"\x00\x01binary",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _envelope(
    signer: signing.Signer, files: dict[str, bytes] = FILES, version: int = 1
) -> envelopes.Envelope:
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    return envelopes.build(
        app="shop",
        version=version,
        files=files,
        file_hashes=hashes,
        sha256=canonical.aggregate_sha256(hashes),
        prev_version=None,
        prev_sha256=None,
        created_at="2030-01-01T00:00:00Z",
        signer=signer,
    )


def _served(document: object) -> dict[str, object]:
    """What the pod receives: the control plane's canonical bytes, parsed."""
    parsed = json.loads(signing.canonical_json(document))
    assert isinstance(parsed, dict)
    return parsed


def _trusted(signer: signing.Signer) -> dict[documents.KeyId, bytes]:
    return verifying.trusted_keys([signer.public_key.hex()])


def _deployment(envelope: envelopes.Envelope) -> documents.Deployment:
    return {
        "workspace_id": "default",
        "artifact_id": envelope["artifact_id"],
        "sha256": envelope["sha256"],
        "cluster_id": "local",
    }


@given(json_values)
@settings(max_examples=200, deadline=None)
def test_canonical_json_is_the_same_bytes(document: object) -> None:
    assert verifying.canonical_json(document) == signing.canonical_json(document)


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.binary(max_size=16), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_file_and_aggregate_hashes_are_the_same(files: dict[str, bytes]) -> None:
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    assert {p: verifying.file_sha256(c) for p, c in files.items()} == hashes
    assert verifying.aggregate_sha256(hashes) == canonical.aggregate_sha256(hashes)


def test_key_id_and_artifact_id_are_the_same() -> None:
    signer = signing.Signer.generate()
    assert verifying.key_id(signer.public_key) == signer.key_id == signing.key_id(signer.public_key)
    envelope = _envelope(signer)
    assert (
        verifying.artifact_id_for(envelope["app"], envelope["version"], envelope["sha256"])
        == envelope["artifact_id"]
        == envelopes.artifact_id_for("shop", 1, envelope["sha256"])
    )


def test_an_envelope_signed_by_control_verifies_in_the_pod() -> None:
    signer = signing.Signer.generate()
    envelope = _envelope(signer)
    artifact = verifying.verify_envelope(_served(envelope), _trusted(signer), _deployment(envelope))
    assert dict(artifact.files) == FILES
    assert artifact.key_id == signer.key_id
    assert (artifact.artifact_id, artifact.version, artifact.sha256) == (
        envelope["artifact_id"],
        1,
        envelope["sha256"],
    )
    # and the control plane's own verifier agrees with the same input
    assert envelopes.verify(_served(envelope), {signer.key_id: signer.public_key}) == FILES


def test_a_snapshot_signed_by_control_verifies_in_the_pod() -> None:
    signer = signing.Signer.generate()
    envelope = _envelope(signer)
    now = datetime.now(UTC).replace(microsecond=0)
    state = snapshots.State(version=7, issued_at=now, ttl=timedelta(hours=1), environment="development")
    deployment: snapshots.Deployment = {
        "workspace_id": "default",
        "artifact_id": envelope["artifact_id"],
        "sha256": envelope["sha256"],
        "cluster_id": "local",
    }
    signed = signer.sign(snapshots.document(state, [deployment]))
    snapshot = verifying.verify_snapshot(_served(signed), _trusted(signer), running_version=6, now=now)
    assert snapshot["version"] == 7
    assert documents.deployment_for(snapshot, "default") == deployment
    assert documents.deployment_for(snapshot, "other") is None


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(
            lambda e: e["files"][0].update(content=base64.b64encode(b"evil").decode()), id="content"
        ),
        pytest.param(lambda e: e.update(app="other"), id="metadata"),
        pytest.param(lambda e: e.update(signature="00" * 64), id="signature"),
        pytest.param(lambda e: e["files"].pop(), id="file-removed"),
    ],
)
def test_both_sides_refuse_a_tampered_envelope(tamper: object) -> None:
    signer = signing.Signer.generate()
    envelope = _envelope(signer)
    expected = _deployment(envelope)
    served = _served(envelope)
    tamper(served)  # type: ignore[operator]
    with pytest.raises(errors.SignatureInvalid):
        verifying.verify_envelope(served, _trusted(signer), expected)
    with pytest.raises(control_errors.SignatureError):
        envelopes.verify(served, {signer.key_id: signer.public_key})


def test_records_built_by_the_pod_pass_the_control_planes_validation() -> None:
    now = datetime.now(UTC)
    target: documents.Deployment = {
        "workspace_id": "w1",
        "artifact_id": "art-1",
        "sha256": "a" * 64,
        "cluster_id": None,
    }
    status = converging.fetched(converging.Status(), target)
    records: list[evidence.Record] = []
    deploy = evidence.deploy_status(status, workspace="w1", cluster="c1", at=now)
    assert deploy is not None
    records.append(deploy)
    records.append(
        evidence.health("healthy", {"postgres": "ok"}, workspace="w1", cluster=None, pod="pod-1", at=now)
    )
    records.append(
        evidence.metering(
            {"requests": 3, "rows": 10, "storage_bytes": 2048},
            workspace="w1",
            cluster="c1",
            start=now - timedelta(minutes=5),
            end=now,
        )
    )
    for error in (
        errors.SignatureInvalid("bad"),
        errors.RollbackRefused("old"),
        errors.SnapshotExpired("stale"),
    ):
        records.append(
            evidence.violation(
                error, workspace="w1", cluster=None, at=now, artifact_id="art-1", snapshot_version=3
            )
        )
    parsed = control_evidence.validate_batch({"records": records})
    assert [r.type for r in parsed] == [
        "deploy_status",
        "health",
        "metering",
        "violation",
        "violation",
        "violation",
    ]
    assert [r.id for r in parsed] == [r["id"] for r in records]
    kinds = [getattr(r, "kind", None) for r in parsed[3:]]
    assert kinds == ["signature", "rollback", "freeze"]
