"""An artifact that fails verification, reported on its Workspace (``kubectl describe``).

The pods of the namespace ``e2e-refused`` are given a signing policy (``DAP_POLICY_KEYS``,
``DAP_POLICY_THRESHOLD=1`` in that namespace's ``dap-pod`` Secret) that no artifact registered
here meets: the cluster control signs it, nobody approves it, so every pod refuses it
(``PolicyRefused``, a verification error) and says so in its ``/health``. The operator reads the
pods' ``/health`` (``dap/operator/podhealth.py``) and the Workspace becomes ``Degraded``, reason
``ArtifactVerificationFailed``, the pod's message in the condition; books keeps serving.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from conftest import JWT_SECRET, NS, WS, Books, record, register
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from traffic import http

pytestmark = pytest.mark.e2e

REFUSED_NS = "e2e-refused"
REFUSED = "refused"

APP = {
    "refusal/module.yaml": (
        "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: refusal}\nspec: {title: Refusal}\n"
    ),
    "refusal/note.yaml": (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: note, module: refusal}\n"
        "spec:\n  title: Note\n  fields:\n    - {name: title, type: string, required: true}\n"
        "  expose:\n    - type: rest\n"
    ),
}


def _approver() -> str:
    """A public key nobody signs with: the policy's only approver."""
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def _manifests() -> str:
    return f"""apiVersion: v1
kind: Namespace
metadata: {{name: {REFUSED_NS}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: dap-pod, namespace: {REFUSED_NS}}}
stringData:
  DAP_DSN: postgresql://dap:e2e-postgres-password@postgres.{NS}.svc:5432/postgres
  DAP_JWT_SECRET: {JWT_SECRET}
  DAP_PULL_INTERVAL: 2s
  DAP_CORS_ORIGIN: http://127.0.0.1
  DAP_POLICY_KEYS: {_approver()}
  DAP_POLICY_THRESHOLD: "1"
---
apiVersion: dap.io/v1alpha1
kind: Workspace
metadata: {{name: {REFUSED}, namespace: {REFUSED_NS}}}
spec: {{owner: e2e@example.com, clusterClass: kind}}
"""


def _degraded(workspace: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((workspace or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Degraded"), {})


def test_an_artifact_failing_verification_is_on_its_workspace(books: Books, tmp_path: Path) -> None:
    kube = books.kube
    kube.run("apply", "-f", "-", stdin=_manifests())
    try:
        kube.wait_for(
            lambda: (
                kube.run(
                    "get",
                    "pods",
                    "-n",
                    REFUSED_NS,
                    "-l",
                    f"dap.io/workspace={REFUSED}",
                    "-o",
                    "jsonpath={.items[*].status.phase}",
                ).split()
                == ["Running"]
            ),
            what="the refused workspace's pod Running",
        )
        for name, text in APP.items():
            (tmp_path / "refusal" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "refusal" / name).write_text(text)
        register(kube, tmp_path / "refusal", ws=REFUSED, app="refusal")
        registered = time.monotonic()
        condition = kube.wait_for(
            lambda: (
                (c := _degraded(kube.get("workspace", REFUSED, REFUSED_NS))).get("reason")
                == "ArtifactVerificationFailed"
                and c
            ),
            within=120,
            what="refused: Degraded, ArtifactVerificationFailed",
        )
        record("artifact_refused_to_condition_s", round(time.monotonic() - registered, 1))
        assert condition["status"] == "True", condition
        assert "valid approval" in condition["message"], condition  # the pod's own words
        workspace = kube.get("workspace", REFUSED, REFUSED_NS)
        assert workspace is not None
        assert workspace["status"]["phase"] == "Degraded", workspace
        described = kube.run("describe", "workspace", REFUSED, "-n", REFUSED_NS)
        assert "ArtifactVerificationFailed" in described, described
        assert "signing policy needs 1 of 1" in described, described

        status, body = http("GET", f"{books.api}/stock/item?limit=1", books.token)
        assert status == 200, body  # the others keep serving
        books_ws = kube.get("workspace", WS, NS)
        assert _degraded(books_ws).get("status") == "False", books_ws
    finally:
        kube.run("delete", "namespace", REFUSED_NS, "--wait=false", check=False)
