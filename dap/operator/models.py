"""Pydantic models of the four custom resources' ``spec`` and ``status``: the source of the CRDs.

The specification names the fields of ClusterClass, Workspace, Datastore and ResourceClaim but
not their value types; these models decide them (docs/decisions/operator.md explains each). They
exist for one purpose: ``crds.py`` turns their JSON Schema into the structural OpenAPI v3 schemas
of the CustomResourceDefinitions, so the types are written once and the YAML cannot drift from
them. At run time the operator reads the raw bodies (typed in ``bodies.py``), which the API
server has already validated against these very schemas; re-parsing them with pydantic on every
event would only cost memory and time.
"""

# ruff: noqa: N815 - field names are the Kubernetes API's camelCase, by design
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Quantity = int | str  # rendered as x-kubernetes-int-or-string, like Kubernetes quantities
AccessPermission = Literal["read", "write", "read_write"]
DatastoreDriver = Literal[
    "sqlite", "postgres", "valkey", "redis", "s3", "garage", "minio", "nats", "memory", "fs"
]
HEX_ED25519_KEY = r"^[0-9a-fA-F]{64}$"
HEX_ED25519_SIGNATURE = r"^[0-9a-fA-F]{128}$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
FEATURE_AUTO_SCALING = "auto-scaling"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Scaling(_Model):
    """Replica bounds of every workspace of a class."""

    minReplicas: Annotated[int, Field(ge=0, description="Replicas of a workspace when not idle.")] = 1
    maxReplicas: Annotated[
        int | None, Field(ge=1, description="Upper bound for the autoscaler (feature auto-scaling).")
    ] = None
    scaleToZero: Annotated[
        bool, Field(description="When true, a workspace annotated dap.io/idle=true runs 0 replicas.")
    ] = False
    targetCPUUtilizationPercentage: Annotated[
        int | None, Field(ge=1, le=100, description="Autoscaler CPU target (default 80).")
    ] = None


class Pricing(_Model):
    """What a workspace of this class costs; informational, read by the control plane."""

    currency: Annotated[str | None, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code.")] = None
    monthly: Annotated[str | None, Field(description="Decimal amount per workspace per month.")] = None
    hourly: Annotated[str | None, Field(description="Decimal amount per workspace per hour.")] = None


class ClusterClassSpec(_Model):
    sla: Annotated[str | None, Field(description="Service level name, e.g. gold.")] = None
    nodeType: Annotated[str | None, Field(description="Machine type the class runs on.")] = None
    maxWorkspaces: Annotated[int | None, Field(ge=1, description="Workspaces per cluster.")] = None
    scaling: Scaling | None = None
    pricing: Pricing | None = None
    features: Annotated[
        list[str] | None, Field(description="Capabilities; 'auto-scaling' adds an autoscaler.")
    ] = None


class ResourceRequirements(_Model):
    """Kubernetes ResourceRequirements of the workspace's container."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class WorkspaceSpec(_Model):
    owner: Annotated[str | None, Field(description="Principal that owns the workspace.")] = None
    region: Annotated[str | None, Field(description="Region used by class-based routing.")] = None
    clusterClass: Annotated[str | None, Field(description="Name of a ClusterClass.")] = None
    cluster: Annotated[str | None, Field(description="Direct cluster assignment (bypasses routing).")] = None
    environment: Annotated[str | None, Field(description="Environment name, e.g. prod.")] = None
    resources: ResourceRequirements | None = None
    datastores: Annotated[
        list[str] | None, Field(description="Datastores the workspace expects claims for.")
    ] = None
    cache: Annotated[
        dict[str, str] | None, Field(description="Cache settings passed to the pod as DAP_CACHE_*.")
    ] = None


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: Annotated[int | None, Field(ge=0)] = None


class WorkspaceStatus(_Model):
    phase: Literal["Pending", "Progressing", "Ready", "Degraded", "Idle", "Failed"] | None = None
    cluster: Annotated[
        str | None, Field(description="Management cluster: the member cluster the region placed it on.")
    ] = None
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None
    replicas: int | None = None
    readyReplicas: int | None = None


class SecretReference(_Model):
    name: Annotated[str, Field(pattern=DNS_LABEL.replace("([-a-z0-9]", "([-.a-z0-9]"))]


class DatastoreSpec(_Model):
    driver: DatastoreDriver
    endpointSecretRef: SecretReference
    allowedTenants: Annotated[
        list[str] | None, Field(description="Workspace names ('name' or 'namespace/name').")
    ] = None
    owner: Annotated[str | None, Field(description="Principal owning the datastore.")] = None
    ownerPublicKey: Annotated[str, Field(pattern=HEX_ED25519_KEY, description="Hex ed25519 public key.")]
    capacity: Annotated[
        dict[str, Quantity] | None, Field(description="Quantities, e.g. storage: 10Gi, connections: 50.")
    ] = None


class ConditionsStatus(_Model):
    phase: str | None = None
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None
    secretName: Annotated[str | None, Field(description="Claim: the credentials Secret written.")] = None
    secretDigest: Annotated[str | None, Field(description="Claim: digest of that Secret's data.")] = None


class ResourceClaimSpec(_Model):
    datastore: Annotated[str, Field(description="Datastore name, or 'namespace/name'.")]
    workspace: Annotated[str, Field(description="Workspace name in the claim's namespace.")]
    permission: AccessPermission
    grantedBy: Annotated[str, Field(min_length=1)]
    grantedAt: Annotated[str, Field(min_length=1, description="RFC 3339 time, signed verbatim.")]
    signature: Annotated[
        str | None,
        Field(
            pattern=HEX_ED25519_SIGNATURE,
            description="Hex ed25519 signature by the owner; a claim without one is denied, except "
            "on a local datastore under dev mode's --dev-auto-grant-claims.",
        ),
    ] = None


ClusterState = Literal["active", "draining", "inactive"]


class ClusterSpec(_Model):
    """A member (workload) cluster as the region control routes to it (spec "General rules" 5).

    Routing reads the labels ``dap.io/region`` and ``dap.io/cluster-class`` from the object's
    metadata; the spec holds what is not a label.
    """

    maxWorkspaces: Annotated[int, Field(ge=0, description="Workspaces this cluster may host.")] = 100
    state: Annotated[
        ClusterState, Field(description="Only 'active' clusters receive workspaces; others are drained.")
    ] = "active"
    load: Annotated[
        float | None, Field(ge=0, description="Routing load when no node report gives one (lower wins).")
    ] = None


class ClusterStatus(_Model):
    phase: Annotated[
        Literal["Active", "Draining", "Inactive"] | None,
        Field(description="What routing makes of the cluster (from spec.state)."),
    ] = None
    workspaces: Annotated[int | None, Field(ge=0, description="Workspaces placed on the cluster.")] = None
    lastPull: Annotated[
        str | None, Field(description="When the cluster control last pulled its placements.")
    ] = None
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None
