"""Desired objects of a Workspace: pure functions from (workspace, class, claims, settings) to bodies.

Every Kubernetes object the operator owns for a workspace is computed here, without I/O, so that
the rules of the specification ("Operator reconcile rules (workspace)") are tested as plain
functions: replicas from the class scaling and the idle annotation, node selector from the
class's ``dap.io/`` labels, anti-affinity from two replicas up, the artifact-binary-hash copied to
the pod template, credentials of Ready claims as ``envFrom`` of per-claim Secrets, an autoscaler
only with the ``auto-scaling`` feature, and owner references on everything.

A value of ``None`` in a desired body means "this key must be absent": ``diffing.patch_for`` turns
it into a JSON merge-patch deletion when the live object still has it, and ``diffing.creatable``
strips it before a create. That is how a field the operator stopped wanting (anti-affinity after
a class went down to one replica, the hash annotation after it was removed) is taken away.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence

from dap.config import names
from dap.operator import bodies, models

MANAGED_BY = "dap-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_WORKSPACE = f"{names.CRD_GROUP}/workspace"
LABEL_CLAIM = f"{names.CRD_GROUP}/claim"
ANNOTATION_CONFIG_HASH = f"{names.CRD_GROUP}/config-hash"
ANNOTATION_CREDENTIALS_HASH = f"{names.CRD_GROUP}/credentials-hash"
CONTAINER_NAME = "resource"
HTTP_PORT = 8080
HEALTH_PATH = "/health"  # liveness: the process answers and Postgres is reachable
READY_PATH = "/ready"  # readiness: an artifact is loaded and served (dap.resource_pod.hosting)
DRAIN_SECONDS = 5  # preStop: the endpoints drop a terminating pod before it stops serving
DEFAULT_CPU_TARGET = 80
AUTOSCALE_HEADROOM = 3  # maxReplicas defaults to this many times minReplicas
MAX_NAME = 63


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    """The operator-wide inputs of the builders (from the command-line options)."""

    resource_image: str
    control_cluster_url: str
    trusted_keys: tuple[str, ...] = ()
    # A Secret of the workspace's namespace that every pod reads as environment (optional: a pod
    # starts without it): what the cluster's administrator gives all pods, such as DAP_DSN.
    pod_env_secret: str = ""


@dataclasses.dataclass(frozen=True)
class ClaimGrant:
    """A Ready ResourceClaim as the workspace's Deployment consumes it."""

    claim: bodies.ClaimName
    datastore: str
    secret: bodies.SecretName
    digest: str = ""  # of the Secret's data: a rotated credential rolls the pods


@dataclasses.dataclass(frozen=True)
class Desired:
    """Everything one workspace should have; ``autoscaler`` is None when it must not exist."""

    deployment: bodies.Manifest
    service: bodies.Manifest
    config_map: bodies.Manifest
    autoscaler: bodies.Manifest | None
    replicas: int


def child_name(workspace: str) -> str:
    """Name of the Deployment, Service, ConfigMap and HPA of a workspace (a DNS-1035 label)."""
    name = f"dap-{workspace}".replace(".", "-")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(workspace.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9].rstrip('-')}-{digest}"


def claim_secret_name(claim: str) -> bodies.SecretName:
    """Name of the Secret holding the credentials a claim grants (owned by the claim)."""
    name = f"dap-claim-{claim}"
    if len(name) > 253:
        name = f"{name[:240]}-{hashlib.sha256(claim.encode()).hexdigest()[:8]}"
    return bodies.SecretName(name)


def env_key(text: str) -> str:
    """An environment-variable-safe, upper-case form of ``text`` (secret keys, datastore names)."""
    key = re.sub(r"[^A-Za-z0-9_]", "_", text).upper()
    return f"_{key}" if key[:1].isdigit() else key


def owner_reference(kind: str, meta: bodies.ObjectMeta) -> bodies.OwnerReference:
    return {
        "apiVersion": names.CRD_API_VERSION,
        "kind": kind,
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workspace_labels(workspace: str) -> dict[str, str]:
    return {
        LABEL_NAME: "dap-workspace",
        LABEL_INSTANCE: workspace,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_WORKSPACE: workspace,
    }


def _scaling(cls: bodies.ClusterClassBody | None) -> bodies.Scaling:
    if cls is None:
        return {}
    return cls.get("spec", {}).get("scaling", {})


def autoscaling_enabled(cls: bodies.ClusterClassBody | None) -> bool:
    return cls is not None and models.FEATURE_AUTO_SCALING in cls.get("spec", {}).get("features", [])


def is_idle(workspace: bodies.WorkspaceBody) -> bool:
    value = workspace["metadata"].get("annotations", {}).get(names.ANNOTATION_IDLE, "")
    return value.strip().lower() == "true"


def desired_replicas(workspace: bodies.WorkspaceBody, cls: bodies.ClusterClassBody | None) -> int:
    """minReplicas of the class (1 without one); 0 when the class scales to zero and ws is idle."""
    scaling = _scaling(cls)
    if scaling.get("scaleToZero", False) and is_idle(workspace):
        return 0
    return int(scaling.get("minReplicas", 1))


def node_selector(cls: bodies.ClusterClassBody | None) -> dict[str, str]:
    """The class's own labels under the ``dap.io/`` prefix, as the pods' node selector."""
    if cls is None:
        return {}
    labels = cls["metadata"].get("labels", {})
    return {k: v for k, v in sorted(labels.items()) if k.startswith(names.NODE_LABEL_PREFIX)}


def config_data(workspace: bodies.WorkspaceBody, settings: OperatorSettings) -> dict[str, str]:
    """The workspace's ConfigMap: settings the pod reads as environment, and the trusted keys."""
    meta = workspace["metadata"]
    spec = workspace.get("spec", {})
    data = {
        names.ENV_WORKSPACE_ID: meta["name"],
        names.ENV_TRUSTED_KEYS: ",".join(settings.trusted_keys),
    }
    optional = {
        "DAP_OWNER": spec.get("owner"),
        "DAP_REGION": spec.get("region"),
        "DAP_ENVIRONMENT": spec.get("environment"),
        "DAP_CLUSTER": spec.get("cluster"),
        "DAP_CLUSTER_CLASS": spec.get("clusterClass"),
        "DAP_DATASTORES": ",".join(spec.get("datastores", [])) or None,
    }
    data.update({k: v for k, v in optional.items() if v})
    for key, value in sorted(spec.get("cache", {}).items()):
        data[f"DAP_CACHE_{env_key(key)}"] = str(value)
    return data


def config_hash(data: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]


def credentials_hash(grants: Sequence[ClaimGrant]) -> str | None:
    """Changes when a claim is added, removed or its Secret's data changes; None without claims."""
    if not grants:
        return None
    parts = sorted(f"{g.claim}={g.secret}@{g.digest}" for g in grants)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def data_digest(data: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]


def _anti_affinity(workspace: str) -> dict[str, object]:
    # Preferred, not required: a small cluster (kind, one node) still schedules every replica,
    # while a real one spreads them across nodes.
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {LABEL_WORKSPACE: workspace}},
                    },
                }
            ]
        }
    }


def _probe(path: str, initial_delay: int, period: int, failures: int) -> dict[str, object]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def _env_from(
    config_map: str, grants: Sequence[ClaimGrant], pod_env_secret: str = ""
) -> list[dict[str, object]]:
    sources: list[dict[str, object]] = [{"configMapRef": {"name": config_map}}]
    if pod_env_secret:
        sources.append({"secretRef": {"name": pod_env_secret, "optional": True}})
    for grant in sorted(grants, key=lambda g: g.claim):
        sources.append(
            {"prefix": f"DAP_DATASTORE_{env_key(grant.datastore)}_", "secretRef": {"name": grant.secret}}
        )
    return sources


def _env(name: str, value: str) -> dict[str, str]:
    # The API server stores an empty value as no value at all (omitempty); written the same way
    # here, or every resync would see a difference and patch the Deployment again.
    return {"name": name, "value": value} if value else {"name": name}


def deployment(
    workspace: bodies.WorkspaceBody,
    cls: bodies.ClusterClassBody | None,
    grants: Sequence[ClaimGrant],
    settings: OperatorSettings,
) -> bodies.Manifest:
    meta = workspace["metadata"]
    ws = meta["name"]
    name = child_name(ws)
    labels = workspace_labels(ws)
    replicas = desired_replicas(workspace, cls)
    scaling = _scaling(cls)
    artifact_hash = meta.get("annotations", {}).get(names.ANNOTATION_ARTIFACT_BINARY_HASH)
    container: dict[str, object] = {
        "name": CONTAINER_NAME,
        "image": settings.resource_image,
        "args": ["pod"],
        "env": [
            _env(names.ENV_CONTROL_CLUSTER_URL, settings.control_cluster_url),
            _env(names.ENV_WORKSPACE_ID, ws),
        ],
        "envFrom": _env_from(name, grants, settings.pod_env_secret),
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "readinessProbe": _probe(READY_PATH, initial_delay=1, period=2, failures=2),
        "livenessProbe": _probe(HEALTH_PATH, initial_delay=10, period=10, failures=6),
        # SIGTERM only once the Service has stopped sending here: requests in flight finish
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
        "resources": dict(workspace.get("spec", {}).get("resources", {})),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    spec: dict[str, object] = {
        "selector": {"matchLabels": {LABEL_WORKSPACE: ws}},
        # a new pod is Ready (artifact served) before an old one goes: no gap in what serves
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {
            "metadata": {
                "labels": labels,
                "annotations": {
                    names.ANNOTATION_ARTIFACT_BINARY_HASH: artifact_hash,
                    ANNOTATION_CONFIG_HASH: config_hash(config_data(workspace, settings)),
                    ANNOTATION_CREDENTIALS_HASH: credentials_hash(grants),
                },
            },
            "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "nodeSelector": node_selector(cls),
                "affinity": _anti_affinity(ws) if int(scaling.get("minReplicas", 1)) >= 2 else None,
                "containers": [container],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
            },
        },
    }
    # With an autoscaler the replica count belongs to it, except when idle: then it is 0 here.
    if not autoscaling_enabled(cls) or replicas == 0:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _child_meta(workspace, name, labels),
        "spec": spec,
    }


def _child_meta(workspace: bodies.WorkspaceBody, name: str, labels: dict[str, str]) -> dict[str, object]:
    meta = workspace["metadata"]
    return {
        "name": name,
        "namespace": meta.get("namespace", ""),
        "labels": labels,
        "ownerReferences": [owner_reference("Workspace", meta)],
    }


def service(workspace: bodies.WorkspaceBody) -> bodies.Manifest:
    ws = workspace["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _child_meta(workspace, child_name(ws), workspace_labels(ws)),
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_WORKSPACE: ws},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def config_map(workspace: bodies.WorkspaceBody, settings: OperatorSettings) -> bodies.Manifest:
    ws = workspace["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _child_meta(workspace, child_name(ws), workspace_labels(ws)),
        "data": config_data(workspace, settings),
    }


def autoscaler(
    workspace: bodies.WorkspaceBody, cls: bodies.ClusterClassBody | None
) -> bodies.Manifest | None:
    """The HorizontalPodAutoscaler, or None when the class lacks the feature or ws is idle."""
    if not autoscaling_enabled(cls) or desired_replicas(workspace, cls) == 0:
        return None
    ws = workspace["metadata"]["name"]
    scaling = _scaling(cls)
    minimum = max(int(scaling.get("minReplicas", 1)), 1)
    maximum = max(int(scaling.get("maxReplicas", minimum * AUTOSCALE_HEADROOM)), minimum)
    target = int(scaling.get("targetCPUUtilizationPercentage", DEFAULT_CPU_TARGET))
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _child_meta(workspace, child_name(ws), workspace_labels(ws)),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": child_name(ws)},
            "minReplicas": minimum,
            "maxReplicas": maximum,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": target},
                    },
                }
            ],
        },
    }


def desired(
    workspace: bodies.WorkspaceBody,
    cls: bodies.ClusterClassBody | None,
    grants: Sequence[ClaimGrant],
    settings: OperatorSettings,
) -> Desired:
    """All desired objects of one workspace."""
    return Desired(
        deployment=deployment(workspace, cls, grants, settings),
        service=service(workspace),
        config_map=config_map(workspace, settings),
        autoscaler=autoscaler(workspace, cls),
        replicas=desired_replicas(workspace, cls),
    )


def claim_secret(
    claim: bodies.ResourceClaimBody,
    datastore: bodies.DatastoreBody,
    endpoint: bodies.SecretBody,
) -> bodies.Manifest:
    """The per-claim Secret: the datastore's endpoint Secret with env-safe keys, plus the grant.

    Keys are made environment-safe here (``host`` → ``HOST``) because the Deployment consumes
    the Secret through ``envFrom`` with a per-datastore prefix. Values are copied as they are
    (already base64). The Secret is owned by the claim, never by the workspace: deleting the
    claim deletes the credentials; deleting the workspace leaves them (spec rule 4).
    """
    meta = claim["metadata"]
    spec = claim.get("spec", {})
    data = {env_key(key): value for key, value in sorted(endpoint.get("data", {}).items())}
    grant = {
        "PERMISSION": spec.get("permission", ""),
        "DRIVER": datastore.get("spec", {}).get("driver", ""),
        "DATASTORE": datastore["metadata"]["name"],
    }
    data.update({k: base64.b64encode(v.encode()).decode() for k, v in grant.items()})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": claim_secret_name(meta["name"]),
            "namespace": meta.get("namespace", ""),
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_CLAIM: meta["name"],
                LABEL_WORKSPACE: spec.get("workspace", ""),
            },
            "ownerReferences": [owner_reference("ResourceClaim", meta)],
        },
        "data": data,
    }
