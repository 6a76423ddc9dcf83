"""CustomResourceDefinitions of dap.io/v1alpha1, generated from the models in ``models.py``.

Run ``python -m dap.operator.crds crds`` (``make crds``) to write one YAML file per kind into
``crds/`` (plus the ``kustomization.yaml`` that ``kustomize/base`` includes); ``--check`` exits 1
when the files on disk differ from what the models give, which is what the test suite and CI use
to catch a stale directory.

Pydantic writes JSON Schema (draft 2020-12 flavoured); Kubernetes wants a *structural* OpenAPI v3
schema: every node typed, no ``$ref``, no ``anyOf`` of different types, no ``additionalProperties``
beside ``properties``. ``structural`` is the pure translation between the two, kept deliberately
small: it knows exactly the constructs the models use and fails loudly on anything else, so a new
construct in a model cannot slip into a CRD half-translated.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from dap.config import names
from dap.operator import models

JsonSchema = dict[str, Any]


class SchemaTranslationError(ValueError):
    """A model uses a JSON Schema construct that has no structural translation here."""


@dataclasses.dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    spec: type[BaseModel]
    status: type[BaseModel] | None
    columns: tuple[tuple[str, str, str], ...]  # (name, type, jsonPath)
    spec_required: bool = True

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{names.CRD_GROUP}"


def _condition_column(name: str, condition: str) -> tuple[str, str, str]:
    return (name, "string", f'.status.conditions[?(@.type=="{condition}")].status')


KINDS: tuple[Kind, ...] = (
    Kind(
        kind="ClusterClass",
        plural="clusterclasses",
        short_names=("dcc",),
        namespaced=False,
        spec=models.ClusterClassSpec,
        status=None,
        columns=(
            ("SLA", "string", ".spec.sla"),
            ("Node-Type", "string", ".spec.nodeType"),
            ("Min-Replicas", "integer", ".spec.scaling.minReplicas"),
            ("Scale-To-Zero", "boolean", ".spec.scaling.scaleToZero"),
        ),
        spec_required=False,
    ),
    Kind(
        kind="Workspace",
        plural="workspaces",
        short_names=("dws",),
        namespaced=True,
        spec=models.WorkspaceSpec,
        status=models.WorkspaceStatus,
        columns=(
            ("Phase", "string", ".status.phase"),
            _condition_column("Ready", "Ready"),
            ("Class", "string", ".spec.clusterClass"),
            ("Cluster", "string", ".status.cluster"),
            ("Replicas", "integer", ".status.readyReplicas"),
        ),
        spec_required=False,
    ),
    Kind(
        kind="Datastore",
        plural="datastores",
        short_names=("dds",),
        namespaced=True,
        spec=models.DatastoreSpec,
        status=models.ConditionsStatus,
        columns=(
            ("Phase", "string", ".status.phase"),
            _condition_column("Validated", "Validated"),
            ("Driver", "string", ".spec.driver"),
        ),
    ),
    Kind(
        kind="ResourceClaim",
        plural="resourceclaims",
        short_names=("drc",),
        namespaced=True,
        spec=models.ResourceClaimSpec,
        status=models.ConditionsStatus,
        columns=(
            ("Phase", "string", ".status.phase"),
            _condition_column("Ready", "Ready"),
            ("Datastore", "string", ".spec.datastore"),
            ("Workspace", "string", ".spec.workspace"),
        ),
    ),
    Kind(
        kind="Cluster",
        plural="clusters",
        short_names=("dcl",),
        namespaced=False,
        spec=models.ClusterSpec,
        status=models.ClusterStatus,
        columns=(
            ("Region", "string", ".metadata.labels.dap\\.io/region"),
            ("Class", "string", ".metadata.labels.dap\\.io/cluster-class"),
            ("Phase", "string", ".status.phase"),
            ("State", "string", ".spec.state"),
            ("Max", "integer", ".spec.maxWorkspaces"),
            ("Workspaces", "integer", ".status.workspaces"),
        ),
        spec_required=False,
    ),
)

_DROPPED_KEYS = frozenset({"title", "additionalProperties", "$defs", "anyOf", "$ref", "default", "const"})
_KEPT_KEYS = frozenset(
    {"type", "description", "minimum", "maximum", "minLength", "maxLength", "pattern", "enum", "format"}
)


def structural(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    """Translate one pydantic JSON Schema node into a structural OpenAPI v3 schema node."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
        if len(variants) == 1:
            return structural({**variants[0], **rest}, defs)
        types = sorted(v.get("type", "") for v in variants)
        if types == ["integer", "string"]:
            out: JsonSchema = {"x-kubernetes-int-or-string": True}
            if "description" in rest:
                out["description"] = rest["description"]
            return out
        raise SchemaTranslationError(f"anyOf of {types} has no structural form")
    if "const" in node:
        node = {**node, "enum": [node["const"]], "type": node.get("type", "string")}
    if "type" not in node:
        raise SchemaTranslationError(f"untyped schema node: {node}")
    out = {k: v for k, v in node.items() if k in _KEPT_KEYS}
    if node.get("default") is not None:
        out["default"] = node["default"]
    unknown = set(node) - _KEPT_KEYS - _DROPPED_KEYS - {"properties", "required", "items"}
    if unknown:
        raise SchemaTranslationError(f"unsupported keys {sorted(unknown)} in {node}")
    if node["type"] == "object":
        if "properties" in node:
            out["properties"] = {name: structural(child, defs) for name, child in node["properties"].items()}
            if node.get("required"):
                out["required"] = list(node["required"])
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = structural(node["additionalProperties"], defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if node["type"] == "array":
        out["items"] = structural(node["items"], defs)
        if "items" in node and _is_condition(node["items"], defs):
            out["x-kubernetes-list-type"] = "map"
            out["x-kubernetes-list-map-keys"] = ["type"]
    return out


def _is_condition(items: JsonSchema, defs: dict[str, JsonSchema]) -> bool:
    ref = items.get("$ref", "")
    return isinstance(ref, str) and ref.endswith("/Condition")


def model_schema(model: type[BaseModel]) -> JsonSchema:
    raw = model.model_json_schema()
    return structural(raw, raw.get("$defs", {}))


def crd(kind: Kind) -> JsonSchema:
    """The CustomResourceDefinition of one kind (a pure function of the models)."""
    properties: JsonSchema = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": model_schema(kind.spec),
    }
    version: JsonSchema = {
        "name": names.CRD_VERSION,
        "served": True,
        "storage": True,
        "additionalPrinterColumns": [
            {"name": name, "type": type_, "jsonPath": path} for name, type_, path in kind.columns
        ]
        + [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
        "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}},
    }
    if kind.spec_required:
        version["schema"]["openAPIV3Schema"]["required"] = ["spec"]
    if kind.status is not None:
        properties["status"] = model_schema(kind.status)
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name},
        "spec": {
            "group": names.CRD_GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": ["dap"],
            },
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [version],
        },
    }


def file_name(kind: Kind) -> str:
    return f"{names.CRD_GROUP}_{kind.plural}.yaml"


def render() -> dict[str, str]:
    """Every CRD file: name to YAML text."""
    header = "# Generated by `make crds` from dap/operator/models.py. Do not edit.\n"
    files = {
        file_name(kind): header + yaml.safe_dump(crd(kind), sort_keys=False, width=100) for kind in KINDS
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [file_name(kind) for kind in KINDS],
    }
    files["kustomization.yaml"] = header + yaml.safe_dump(kustomization, sort_keys=False)
    return files


def stale_files(directory: Path) -> list[str]:
    """Names of the files in ``directory`` that are missing or differ from ``render()``."""
    stale = []
    for name, text in render().items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dap.operator.crds", description=__doc__)
    parser.add_argument("directory", type=Path, help="where to write the CRD files (crds)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the directory is stale")
    args = parser.parse_args(argv)
    directory: Path = args.directory
    if args.check:
        stale = stale_files(directory)
        for name in stale:
            print(f"stale: {directory / name} (run `make crds`)", file=sys.stderr)
        return 1 if stale else 0
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (directory / name).write_text(text)
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
