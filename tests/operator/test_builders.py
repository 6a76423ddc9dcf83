"""The desired objects of a workspace, as pure functions (spec: "Operator reconcile rules")."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from dap.operator import bodies, builders
from dap.resource_pod import hosting

SETTINGS = builders.OperatorSettings(
    resource_image="example.test/dap:1.0",
    control_cluster_url="http://control.dap-system:8443",
    trusted_keys=("a" * 64,),
)


def ws(name: str = "shop", *, annotations: dict[str, str] | None = None, **spec: Any) -> bodies.WorkspaceBody:
    return {
        "metadata": {
            "name": name,
            "namespace": "tenants",
            "uid": "uid-ws",
            "generation": 3,
            "annotations": annotations or {},
        },
        "spec": spec,  # type: ignore[typeddict-item]
    }


def cls(
    *, labels: dict[str, str] | None = None, features: list[str] | None = None, **scaling: Any
) -> bodies.ClusterClassBody:
    return {
        "metadata": {"name": "standard", "labels": labels or {}},
        "spec": {"scaling": scaling, "features": features or []},  # type: ignore[typeddict-item]
    }


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return result


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = pod_spec(deployment)["containers"][0]
    return result


def env(deployment: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(deployment)["env"]}


def test_deployment_runs_the_resource_image_with_control_url_and_workspace_id() -> None:
    dep = builders.deployment(ws(), None, [], SETTINGS)
    assert container(dep)["image"] == "example.test/dap:1.0"
    assert env(dep) == {"CONTROL_CLUSTER_URL": "http://control.dap-system:8443", "WORKSPACE_ID": "shop"}
    assert container(dep)["args"] == ["pod"]
    assert dep["metadata"]["namespace"] == "tenants"


def test_an_empty_control_url_is_written_as_the_api_server_stores_it() -> None:
    # The server drops an empty env value (omitempty); a "" here would differ on every resync.
    settings = builders.OperatorSettings(resource_image="example.test/dap:1.0", control_cluster_url="")
    assert container(builders.deployment(ws(), None, [], settings))["env"][0] == {
        "name": "CONTROL_CLUSTER_URL"
    }


@pytest.mark.parametrize(
    ("scaling", "annotations", "expected"),
    [
        pytest.param({}, {}, 1, id="no-scaling-one-replica"),
        pytest.param({"minReplicas": 3}, {}, 3, id="min-replicas"),
        pytest.param(
            {"minReplicas": 2, "scaleToZero": True}, {"dap.io/idle": "true"}, 0, id="idle-scales-to-zero"
        ),
        pytest.param({"minReplicas": 2, "scaleToZero": True}, {"dap.io/idle": "True"}, 0, id="idle-any-case"),
        pytest.param(
            {"minReplicas": 2, "scaleToZero": False},
            {"dap.io/idle": "true"},
            2,
            id="idle-without-scale-to-zero",
        ),
        pytest.param({"minReplicas": 2, "scaleToZero": True}, {"dap.io/idle": "false"}, 2, id="not-idle"),
        pytest.param({"minReplicas": 0}, {}, 0, id="zero-min"),
    ],
)
def test_replicas_follow_the_class_scaling_and_idle_annotation(
    scaling: dict[str, Any], annotations: dict[str, str], expected: int
) -> None:
    dep = builders.deployment(ws(annotations=annotations), cls(**scaling), [], SETTINGS)
    assert dep["spec"]["replicas"] == expected


def test_node_selector_takes_only_the_class_labels_under_dap_io() -> None:
    labels = {"dap.io/node-type": "c5", "dap.io/region": "eu", "team": "x", "kubernetes.io/os": "linux"}
    dep = builders.deployment(ws(), cls(labels=labels), [], SETTINGS)
    assert pod_spec(dep)["nodeSelector"] == {"dap.io/node-type": "c5", "dap.io/region": "eu"}


@pytest.mark.parametrize(
    ("minimum", "spread"),
    [pytest.param(1, False, id="one"), pytest.param(2, True, id="two"), pytest.param(5, True, id="five")],
)
def test_anti_affinity_from_two_replicas(minimum: int, spread: bool) -> None:
    affinity = pod_spec(builders.deployment(ws(), cls(minReplicas=minimum), [], SETTINGS))["affinity"]
    if spread:
        term = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"dap.io/workspace": "shop"}}
    else:
        assert affinity is None  # "must be absent": removed from a live Deployment that had it


def test_resources_come_from_the_workspace_spec() -> None:
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
    dep = builders.deployment(ws(resources=resources), None, [], SETTINGS)
    assert container(dep)["resources"] == resources


def test_security_context_is_restricted() -> None:
    dep = builders.deployment(ws(), None, [], SETTINGS)
    assert pod_spec(dep)["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    ctx = container(dep)["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert pod_spec(dep)["automountServiceAccountToken"] is False


def test_readiness_asks_the_pod_whether_it_serves_and_liveness_whether_it_lives() -> None:
    dep = builders.deployment(ws(), None, [], SETTINGS)
    c = container(dep)
    assert c["readinessProbe"]["httpGet"] == {"path": hosting.READY_PATH, "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": builders.HEALTH_PATH, "port": "http"}
    assert c["lifecycle"]["preStop"] == {"sleep": {"seconds": builders.DRAIN_SECONDS}}
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}


def test_artifact_hash_is_copied_to_the_pod_template() -> None:
    with_hash = builders.deployment(
        ws(annotations={"dap.io/artifact-binary-hash": "abc"}), None, [], SETTINGS
    )
    other = builders.deployment(ws(annotations={"dap.io/artifact-binary-hash": "def"}), None, [], SETTINGS)
    without = builders.deployment(ws(), None, [], SETTINGS)
    assert with_hash["spec"]["template"]["metadata"]["annotations"]["dap.io/artifact-binary-hash"] == "abc"
    assert with_hash["spec"]["template"] != other["spec"]["template"]  # a changed hash rolls the pods
    assert without["spec"]["template"]["metadata"]["annotations"]["dap.io/artifact-binary-hash"] is None


def test_config_change_rolls_the_pods_through_a_hash() -> None:
    a = builders.deployment(ws(environment="prod"), None, [], SETTINGS)
    b = builders.deployment(ws(environment="staging"), None, [], SETTINGS)
    key = builders.ANNOTATION_CONFIG_HASH
    assert (
        a["spec"]["template"]["metadata"]["annotations"][key]
        != b["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_every_child_is_owned_by_the_workspace() -> None:
    desired = builders.desired(ws(), cls(features=["auto-scaling"]), [], SETTINGS)
    for obj in (desired.deployment, desired.service, desired.config_map, desired.autoscaler):
        assert obj is not None
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Workspace",
            "name": "shop",
            "uid": "uid-ws",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_service_is_cluster_ip_selecting_the_workspace_pods() -> None:
    svc = builders.service(ws())
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == {"dap.io/workspace": "shop"}
    dep = builders.deployment(ws(), None, [], SETTINGS)
    assert dep["spec"]["template"]["metadata"]["labels"]["dap.io/workspace"] == "shop"


def test_config_map_holds_settings_and_trusted_keys() -> None:
    data = builders.config_map(ws(environment="prod", region="eu", cache={"ttl": "30s"}), SETTINGS)["data"]
    assert data["DAP_TRUSTED_KEYS"] == "a" * 64
    assert data["DAP_ENVIRONMENT"] == "prod"
    assert data["DAP_REGION"] == "eu"
    assert data["DAP_CACHE_TTL"] == "30s"
    assert data["WORKSPACE_ID"] == "shop"
    dep = builders.deployment(ws(), None, [], SETTINGS)
    assert {"configMapRef": {"name": "dap-shop"}} in container(dep)["envFrom"]


@pytest.mark.parametrize(
    ("features", "annotations", "expect_hpa"),
    [
        pytest.param(["auto-scaling"], {}, True, id="feature"),
        pytest.param([], {}, False, id="no-feature"),
        pytest.param(["auto-scaling"], {"dap.io/idle": "true"}, False, id="idle-no-hpa"),
    ],
)
def test_autoscaler_only_with_the_feature(
    features: list[str], annotations: dict[str, str], expect_hpa: bool
) -> None:
    workspace = ws(annotations=annotations)
    klass = cls(features=features, minReplicas=2, maxReplicas=6, scaleToZero=True)
    hpa = builders.autoscaler(workspace, klass)
    dep = builders.deployment(workspace, klass, [], SETTINGS)
    if expect_hpa:
        assert hpa is not None
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
        assert "replicas" not in dep["spec"]  # the autoscaler owns the count
    else:
        assert hpa is None
        assert "replicas" in dep["spec"]


def test_ready_claims_are_injected_as_prefixed_env_from_their_secrets() -> None:
    grants = [
        builders.ClaimGrant(bodies.ClaimName("b"), "orders-db", bodies.SecretName("dap-claim-b")),
        builders.ClaimGrant(bodies.ClaimName("a"), "cache", bodies.SecretName("dap-claim-a")),
    ]
    env_from = container(builders.deployment(ws(), None, grants, SETTINGS))["envFrom"]
    assert env_from[1:] == [
        {"prefix": "DAP_DATASTORE_CACHE_", "secretRef": {"name": "dap-claim-a"}},
        {"prefix": "DAP_DATASTORE_ORDERS_DB_", "secretRef": {"name": "dap-claim-b"}},
    ]


def test_the_pod_env_secret_is_read_optionally_by_every_pod_before_the_claims() -> None:
    grant = builders.ClaimGrant(bodies.ClaimName("a"), "cache", bodies.SecretName("dap-claim-a"))
    settings = builders.OperatorSettings(
        resource_image="dap:dev", control_cluster_url="http://control", pod_env_secret="dap-pod"
    )
    env_from = container(builders.deployment(ws(), None, [grant], settings))["envFrom"]
    assert env_from == [
        {"configMapRef": {"name": "dap-shop"}},
        {"secretRef": {"name": "dap-pod", "optional": True}},
        {"prefix": "DAP_DATASTORE_CACHE_", "secretRef": {"name": "dap-claim-a"}},
    ]
    without = container(builders.deployment(ws(), None, [grant], SETTINGS))["envFrom"]
    assert all("optional" not in source.get("secretRef", {}) for source in without)


def test_claim_secret_copies_credentials_with_env_safe_keys_and_is_owned_by_the_claim() -> None:
    claim: bodies.ResourceClaimBody = {
        "metadata": {"name": "shop-orders", "namespace": "tenants", "uid": "uid-claim"},
        "spec": {"datastore": "orders", "workspace": "shop", "permission": "read"},
    }
    datastore: bodies.DatastoreBody = {"metadata": {"name": "orders"}, "spec": {"driver": "postgres"}}
    endpoint: bodies.SecretBody = {
        "metadata": {"name": "orders-endpoint"},
        "data": {"host": "aG9zdA==", "db.password": "cHc="},
    }
    secret = builders.claim_secret(claim, datastore, endpoint)
    assert secret["metadata"]["name"] == "dap-claim-shop-orders"
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "ResourceClaim"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-claim"
    data = secret["data"]
    assert data["HOST"] == "aG9zdA=="
    assert data["DB_PASSWORD"] == "cHc="
    assert base64.b64decode(data["PERMISSION"]) == b"read"
    assert base64.b64decode(data["DRIVER"]) == b"postgres"


@pytest.mark.parametrize(
    "name",
    [pytest.param("shop", id="short"), pytest.param("x" * 80, id="long"), pytest.param("a.b", id="dotted")],
)
def test_child_names_are_dns_labels(name: str) -> None:
    child = builders.child_name(name)
    assert len(child) <= 63
    assert all(c.isalnum() or c == "-" for c in child)
    assert builders.child_name(name) == child  # deterministic


def test_a_rotated_credential_rolls_the_pods() -> None:
    def annotation(grants: list[builders.ClaimGrant]) -> str | None:
        dep = builders.deployment(ws(), None, grants, SETTINGS)
        value: str | None = dep["spec"]["template"]["metadata"]["annotations"][
            builders.ANNOTATION_CREDENTIALS_HASH
        ]
        return value

    grant = builders.ClaimGrant(
        bodies.ClaimName("a"), "orders", bodies.SecretName("dap-claim-a"), digest="d1"
    )
    rotated = builders.ClaimGrant(
        bodies.ClaimName("a"), "orders", bodies.SecretName("dap-claim-a"), digest="d2"
    )
    assert annotation([]) is None
    assert annotation([grant]) is not None
    assert annotation([grant]) == annotation([grant])
    assert annotation([grant]) != annotation([rotated])
