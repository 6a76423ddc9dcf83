"""dap's Kubernetes operator: custom resources in, workspaces' Kubernetes objects out.

Layout (plumbing at the bottom, the kopf shell on top; modules import modules)::

    bodies        TypedDicts of raw Kubernetes bodies, NewType ids
    models        pydantic models of the CRDs' spec/status → crds (generator, `make crds`)
    builders      pure: desired Deployment/Service/ConfigMap/HPA/claim Secret of a workspace
    diffing       pure: desired vs live → smallest JSON merge patch (or none)
    conditions    pure: phase and conditions of Workspace, Datastore, ResourceClaim
    claims        pure: the signed claim message, ed25519 sign/verify, the claim verdict
    errors        the one error tree (drawn there)
    (kube)        the Kubernetes transport is the shared package ``dap.kube``
    caches        kopf indexes behind a typed façade
    reconciling   level-based reconcilers and the nudger (the only writers)
    reporting     node-health and workspace-status reports to the control plane
    trusting      artifact-signing keys from the control plane
    metrics       Prometheus metrics;  probes  /healthz, /readyz, /metrics
    options       the options of one instance
    handlers      the kopf handlers (thin);  running  one operator instance;  cli  `dap operator`, `dap claim`

The public face is below; everything else is internal to the operator.
"""

from __future__ import annotations

from dap.operator.builders import ClaimGrant, Desired, OperatorSettings, desired
from dap.operator.claims import Grant, keygen, sign, verify
from dap.operator.errors import OperatorError
from dap.operator.options import Options
from dap.operator.running import Runtime, run

__all__ = [
    "ClaimGrant",
    "Desired",
    "Grant",
    "OperatorError",
    "OperatorSettings",
    "Options",
    "Runtime",
    "desired",
    "keygen",
    "run",
    "sign",
    "verify",
]
