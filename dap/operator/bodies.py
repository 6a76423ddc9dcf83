"""Typed shapes of the raw Kubernetes bodies the operator reads and writes.

Kubernetes objects arrive as JSON dicts; kopf hands them over as mappings. Rather than parse them
into classes (and copy them on every event), the operator keeps them as dicts and describes their
shape with ``TypedDict`` so that mypy checks every key it touches. Only the keys the operator uses
are declared; everything else passes through untouched. Names of objects are ``NewType`` ids, so
that a workspace name cannot be passed where a datastore name is expected.
"""

from __future__ import annotations

from typing import Any, Literal, NewType, NotRequired, TypedDict

Namespace = NewType("Namespace", str)
WorkspaceName = NewType("WorkspaceName", str)
ClassName = NewType("ClassName", str)
DatastoreName = NewType("DatastoreName", str)
ClaimName = NewType("ClaimName", str)
SecretName = NewType("SecretName", str)
Uid = NewType("Uid", str)

ConditionStatus = Literal["True", "False", "Unknown"]
Phase = Literal["Pending", "Progressing", "Ready", "Degraded", "Idle", "Failed"]


class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: NotRequired[bool]
    blockOwnerDeletion: NotRequired[bool]


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    deletionTimestamp: str


class Condition(TypedDict):
    type: str
    status: ConditionStatus
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: NotRequired[int]


class Scaling(TypedDict, total=False):
    minReplicas: int
    maxReplicas: int
    scaleToZero: bool
    targetCPUUtilizationPercentage: int


class ClusterClassSpec(TypedDict, total=False):
    sla: str
    nodeType: str
    maxWorkspaces: int
    scaling: Scaling
    pricing: dict[str, Any]
    features: list[str]


class ClusterClassBody(TypedDict):
    metadata: ObjectMeta
    spec: NotRequired[ClusterClassSpec]


class ResourceRequirements(TypedDict, total=False):
    requests: dict[str, str | int]
    limits: dict[str, str | int]


class WorkspaceSpec(TypedDict, total=False):
    owner: str
    region: str
    clusterClass: str
    cluster: str
    environment: str
    resources: ResourceRequirements
    datastores: list[str]
    cache: dict[str, Any]
    settings: dict[str, str]


class WorkspaceStatus(TypedDict, total=False):
    phase: Phase
    conditions: list[Condition]
    observedGeneration: int
    replicas: int
    readyReplicas: int


class WorkspaceBody(TypedDict):
    metadata: ObjectMeta
    spec: NotRequired[WorkspaceSpec]
    status: NotRequired[WorkspaceStatus]


class SecretRef(TypedDict):
    name: str


class DatastoreSpec(TypedDict, total=False):
    driver: str
    endpointSecretRef: SecretRef
    allowedTenants: list[str]
    owner: str
    ownerPublicKey: str
    capacity: dict[str, str | int]


class DatastoreBody(TypedDict):
    metadata: ObjectMeta
    spec: NotRequired[DatastoreSpec]
    status: NotRequired[dict[str, Any]]


class ResourceClaimSpec(TypedDict, total=False):
    datastore: str
    workspace: str
    permission: str
    grantedBy: str
    grantedAt: str
    signature: str


class ResourceClaimBody(TypedDict):
    metadata: ObjectMeta
    spec: NotRequired[ResourceClaimSpec]
    status: NotRequired[dict[str, Any]]


class SecretBody(TypedDict):
    apiVersion: NotRequired[str]
    kind: NotRequired[str]
    metadata: ObjectMeta
    type: NotRequired[str]
    data: NotRequired[dict[str, str]]


class DeploymentCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class DeploymentStatus(TypedDict, total=False):
    observedGeneration: int
    replicas: int
    updatedReplicas: int
    readyReplicas: int
    availableReplicas: int
    conditions: list[DeploymentCondition]


class DeploymentBody(TypedDict):
    metadata: ObjectMeta
    spec: NotRequired[dict[str, Any]]
    status: NotRequired[DeploymentStatus]


# A desired or actual object of any kind the operator manages (Deployment, Service, ConfigMap,
# HorizontalPodAutoscaler, Secret): kept loose on purpose, the builders give it its shape.
Manifest = dict[str, Any]
