"""dap installed into a fresh control plane as an administrator would: ``kubectl apply -k`` of the
kind overlay (CRDs, namespace, RBAC, the operator's Deployment), then a token for the operator's
ServiceAccount from the TokenRequest API, written into a kubeconfig the operator logs in with.
Shared by the test session and the benchmark.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import yaml

from tests.kube import controlplane

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "kustomize" / "overlays" / "kind"
OPERATOR_ACCOUNT = ("dap-system", "dap-operator")


def kubectl(
    plane: controlplane.ControlPlane,
    *args: str,
    kubeconfig: Path | None = None,
    stdin: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run the built kubectl, as the administrator unless another ``kubeconfig`` is given."""
    config = kubeconfig or plane.admin_kubeconfig
    result = subprocess.run(  # the built kubectl, our arguments
        [str(plane.binaries / "kubectl"), f"--kubeconfig={config}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


@dataclasses.dataclass(frozen=True)
class Installed:
    applied: str  # what `kubectl apply -k kustomize/overlays/kind` printed
    operator_kubeconfig: Path


def install(plane: controlplane.ControlPlane) -> Installed:
    applied = kubectl(plane, "apply", "-k", str(OVERLAY)).stdout
    kubectl(plane, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    namespace, account = OPERATOR_ACCOUNT
    token = kubectl(plane, "create", "token", account, "-n", namespace, "--duration=24h").stdout.strip()
    path = plane.directory / "operator.kubeconfig"
    path.write_text(
        yaml.safe_dump(controlplane.kubeconfig(plane.url, plane.pki.ca.cert, user={"token": token}))
    )
    return Installed(applied, path)
