"""The generated CRDs (fresh, structural, valid) and the kustomize tree (renders, validates)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from dap.operator import crds
from tests.kube import binaries

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.30"


def crd_docs() -> dict[str, dict[str, Any]]:
    return {kind.kind: crds.crd(kind) for kind in crds.KINDS}


def test_crds_directory_is_fresh() -> None:
    assert crds.stale_files(ROOT / "crds") == [], "crds/ is stale: run `make crds`"


def test_check_mode_reports_a_stale_directory(tmp_path: Path) -> None:
    assert crds.main([str(tmp_path), "--check"]) == 1
    assert crds.main([str(tmp_path)]) == 0
    assert crds.main([str(tmp_path), "--check"]) == 0
    (tmp_path / "dap.io_workspaces.yaml").write_text("edited")
    assert crds.main([str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize("kind", [pytest.param(k, id=k.kind) for k in crds.KINDS])
def test_crd_passes_the_kubernetes_schema(kind: crds.Kind) -> None:
    kubernetes_validate.validate(crds.crd(kind), K8S_VERSION, strict=True)


def _walk_structural(node: dict[str, Any], path: str) -> None:
    assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
    typed = (
        "type" in node
        or node.get("x-kubernetes-int-or-string")
        or node.get("x-kubernetes-preserve-unknown-fields")
    )
    assert typed, f"untyped node at {path}"
    assert not ("properties" in node and "additionalProperties" in node), path
    for name, child in node.get("properties", {}).items():
        _walk_structural(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        _walk_structural(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        _walk_structural(node["items"], f"{path}[]")


@pytest.mark.parametrize("kind", [pytest.param(k, id=k.kind) for k in crds.KINDS])
def test_crd_schema_is_structural_with_status_and_printer_columns(kind: crds.Kind) -> None:
    doc = crds.crd(kind)
    (version,) = doc["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    _walk_structural(schema, kind.kind)
    assert doc["spec"]["names"]["shortNames"]
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert "Age" in columns
    if kind.status is not None:
        assert version["subresources"] == {"status": {}}
        status = schema["properties"]["status"]["properties"]
        assert {"phase", "conditions", "observedGeneration"} <= set(status)
        condition = status["conditions"]["items"]["properties"]
        assert set(condition) == {
            "type",
            "status",
            "reason",
            "message",
            "lastTransitionTime",
            "observedGeneration",
        }
        assert {"Phase", "Age"} <= columns


def to_json_schema(node: Any) -> Any:
    """OpenAPI v3 (structural) → JSON Schema, for validating instances in tests."""
    if isinstance(node, dict):
        if node.get("x-kubernetes-int-or-string"):
            return {"type": ["integer", "string"]}
        out = {k: to_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
        if (
            node.get("type") == "object"
            and "properties" in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False  # the API server would prune: treat as an error here
        return out
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    return node


def validate_custom(doc: dict[str, Any]) -> None:
    crd = crd_docs()[doc["kind"]]
    schema = to_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.Draft7Validator(schema).validate(doc)


def sample_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((ROOT / "kustomize" / "samples").glob("dap_*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


@pytest.mark.parametrize(
    "doc", [pytest.param(d, id=f"{d['kind']}-{d['metadata']['name']}") for d in sample_docs()]
)
def test_samples_are_valid(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("dap.io/"):
        validate_custom(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_sample_per_kind() -> None:
    assert {d["kind"] for d in sample_docs()} >= {k.kind for k in crds.KINDS}


def test_sample_claim_signature_verifies() -> None:
    from dap.operator import claims

    docs = {d["kind"]: d for d in sample_docs()}
    spec = docs["ResourceClaim"]["spec"]
    grant = claims.Grant.from_spec(spec)
    assert claims.verify(grant, spec["signature"], docs["Datastore"]["spec"]["ownerPublicKey"])


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"scaling": {"minReplicas": -1}}, id="negative-replicas"),
        pytest.param({"scaling": {"minReplicas": "two"}}, id="string-replicas"),
        pytest.param({"features": "auto-scaling"}, id="features-not-a-list"),
        pytest.param({"unknown": 1}, id="unknown-field"),
    ],
)
def test_bad_class_specs_are_refused_by_the_schema(bad: dict[str, Any]) -> None:
    doc = {"apiVersion": "dap.io/v1alpha1", "kind": "ClusterClass", "metadata": {"name": "x"}, "spec": bad}
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(doc)


def kubectl() -> str:
    """kubectl from PATH, else the one ``tools/k8s`` builds beside the test control plane."""
    found = shutil.which("kubectl")
    if found is not None:
        return found
    try:
        return str(binaries.ensure() / "kubectl")
    except binaries.NoToolchainError as exc:
        pytest.skip(f"no kubectl on PATH and none can be built: {exc}")


def render(overlay: str) -> list[dict[str, Any]]:
    """``kustomize/overlays/<overlay>``, or ``kustomize/<install>`` for management and workload."""
    where = ROOT / "kustomize" / overlay
    if not (where / "kustomization.yaml").exists():
        where = ROOT / "kustomize" / "overlays" / overlay
    out = subprocess.run(
        [kubectl(), "kustomize", str(where)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("overlay", ["kind", "prod"])
def test_overlay_renders_and_every_object_validates(overlay: str) -> None:
    docs = render(overlay)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "dap-operator") in kinds
    assert ("Deployment", "dap-control") in kinds
    assert ("Service", "dap-control") in kinds
    assert ("ClusterRole", "dap-operator") in kinds
    assert {("CustomResourceDefinition", k.crd_name) for k in crds.KINDS} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("dap.io/"):
            validate_custom(doc)
        elif doc["apiVersion"].startswith("kopf.dev/"):
            continue  # kopf's own peering object; its CRD preserves unknown fields
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_operator_deployment_is_restricted_and_probed() -> None:
    docs = render("prod")
    operator = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dap-operator")
    pod = operator["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "limits" in container["resources"] and "requests" in container["resources"]
    assert "--leader-elect" in container["args"]
    assert operator["spec"]["replicas"] == 2


def test_rbac_is_least_privilege_with_status_and_finalizers_apart() -> None:
    role = next(
        d for d in render("kind") if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "dap-operator"
    )
    rules = role["rules"]
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        subresources = {r for r in rule["resources"] if "/" in r}
        assert not subresources or subresources == set(rule["resources"]), "subresources in their own rules"
    status_rule = next(r for r in rules if "workspaces/status" in r["resources"])
    assert set(status_rule["resources"]) == {
        "workspaces/status",
        "datastores/status",
        "resourceclaims/status",
    }
    assert any("workspaces/finalizers" in r["resources"] for r in rules)
    classes = next(r for r in rules if r["resources"] == ["clusterclasses"])
    assert set(classes["verbs"]) == {"get", "list", "watch"}


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: c
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }


@pytest.mark.parametrize("install", ["management", "workload"])
def test_the_region_installs_render_with_one_image_and_validate(install: str) -> None:
    # Issue 41: kustomize/workload left the cluster control at `image: dap` (docker.io/library/dap).
    docs = render(install)
    images = {name: c["image"] for name, c in _containers(docs).items()}
    assert set(images.values()) == {"ghcr.io/dap-platform/dap:0.1.0"}, images
    for doc in docs:
        if doc["apiVersion"].startswith("dap.io/") or doc["apiVersion"].startswith("kopf.dev/"):
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_workload_install_reads_one_config_map_and_needs_its_database() -> None:
    # Issue 41: the cluster control read dap-cluster-control, the cluster-mode HTTP control
    # dap-control; the database Secret was optional though cluster mode exits without it.
    docs = render("workload")
    containers = _containers(docs)
    maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    assert maps == {"dap-control"}
    for name in ("dap-control", "dap-cluster-control"):
        assert containers[name]["envFrom"] == [{"configMapRef": {"name": "dap-control"}}]
    (db,) = [e for e in containers["dap-control"]["env"] if e["name"] == "DAP_DB"]
    assert db["valueFrom"]["secretKeyRef"] == {"name": "dap-control-db", "key": "dsn", "optional": False}


def test_the_base_operator_runs_pods_of_its_own_image_with_the_pod_secret() -> None:
    # Issue 41: --resource-image=ghcr.io/... was an argument, which images: cannot rewrite, and
    # the pods got no --pod-env-secret (no DSN, no JWT settings).
    operator = _containers(render("workload"))["dap-operator"]
    assert not any(a.startswith("--resource-image") for a in operator["args"])
    assert "--pod-env-secret=dap-pod" in operator["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in operator["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"


def test_the_observability_kustomization_renders_its_config_maps() -> None:
    """kustomize/observability: the scrape configuration and rules, and the Grafana dashboard
    labelled for Grafana's sidecar (tests/server/test_prometheus.py loads the same files)."""
    docs = {d["metadata"]["name"]: d for d in render("observability")}
    assert set(docs) == {"dap-prometheus", "dap-grafana-dashboard"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert set(docs["dap-prometheus"]["data"]) == {"prometheus.yml", "dap-alerts.rules.yaml"}
    dashboard = docs["dap-grafana-dashboard"]
    assert dashboard["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert json.loads(dashboard["data"]["dap-dashboard.json"])["uid"] == "dap-overview"


def test_the_collector_renders_valid_objects_on_the_released_image_or_the_kind_one() -> None:
    """kustomize/observability/collector: Jaeger's all-in-one behind the Service otel-collector
    (OTLP/HTTP :4318, the query API :16686), the image a registry has; the kind overlay swaps in
    the image built here (tools/jaeger/image.sh), never pulled. e2e-kind/test_kind_traces.py runs it."""
    docs = render("observability/collector")
    kinds = {
        (
            d["kind"],
            d["metadata"]["name"].rsplit("-", 1)[0] if d["kind"] == "ConfigMap" else d["metadata"]["name"],
        )
        for d in docs
    }
    assert kinds == {
        ("Namespace", "observability"),
        ("ConfigMap", "otel-collector-config"),
        ("Deployment", "otel-collector"),
        ("Service", "otel-collector"),
    }
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "otlp-grpc": 4317,
        "otlp-http": 4318,
        "query": 16686,
    }
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "jaegertracing/jaeger:2.13.0"
    assert (
        deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        == config_map["metadata"]["name"]
    )
    (kind,) = [d for d in render("kind-observability") if d["kind"] == "Deployment"]
    (container,) = kind["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("dap-jaeger:dev", "Never")


def test_the_collector_configuration_loads_in_the_jaeger_it_names(tmp_path: Path) -> None:
    """The configuration as the collector's Jaeger reads it (``jaeger validate``: every component
    known, every key valid), the binary tools/jaeger/build.sh builds; a bad key is refused."""
    from tests import jaeger

    exe = jaeger.binary()
    config = ROOT / "kustomize" / "observability" / "collector" / "config.yaml"
    done = subprocess.run(
        [exe, "validate", "--config", f"file:{config}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.read_text().replace("batch: {timeout", "batch: {bogus: 1, timeout"))
    done = subprocess.run(
        [exe, "validate", "--config", f"file:{bad}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "bogus" in done.stderr


def test_the_tracing_component_points_the_operator_control_and_pods_at_the_collector(tmp_path: Path) -> None:
    """kustomize/observability/tracing, added to an install (the kind overlay) and to a namespace's
    pod Secret: OTEL_EXPORTER_OTLP_ENDPOINT names the collector's Service in all three, and the
    Secret keeps what it had."""
    endpoint = "http://otel-collector.observability.svc:4318"
    component = ROOT / "kustomize" / "observability" / "tracing"
    (tmp_path / "secret.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: dap-pod, namespace: team}\nstringData: {DAP_DSN: x}\n"
    )
    overlay = ROOT / "kustomize" / "overlays" / "kind"
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(overlay, tmp_path)}, secret.yaml]\n"
        f"components: [{os.path.relpath(component, tmp_path)}]\n"
    )
    out = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path)], check=True, capture_output=True, text=True, timeout=60
    )
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    assert docs[("Secret", "dap-pod")]["stringData"] == {
        "DAP_DSN": "x",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
    }
    for name in ("dap-operator", "dap-control"):
        (container,) = docs[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint, name
        kubernetes_validate.validate(docs[("Deployment", name)], K8S_VERSION, strict=True)
