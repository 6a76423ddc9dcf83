"""What the operator knows of the cluster: kopf indexes, read through one typed façade.

The reconcilers read the live objects from memory, never from the API: a resync of an unchanged
workspace costs no request at all, and kopf pre-populates every index before it calls the first
handler, so a restarted operator sees the Deployments it made before deciding what to create.

``KEYERS`` are the pure functions kopf calls per object to fill each index (they trim bodies to
what the reconcilers compare, dropping ``managedFields`` and the like, which keeps memory small
at 500 workspaces). ``Caches`` wraps the indexes kopf hands to the startup handler, plus a small
"recently written" overlay: after a create or patch the operator remembers the answer until the
watch event for that object arrives, so a second reconcile in between does not send the same
patch twice. The overlay entry is dropped as soon as the event is seen (``forget``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from dap.operator import bodies, builders

ObjectKey = tuple[str, str]  # (namespace, name)
IndexMap = Mapping[Any, Collection[Any]]

INDEX_CLASSES = "dap_classes"
INDEX_WORKSPACES = "dap_workspaces"
INDEX_WORKSPACES_BY_CLASS = "dap_workspaces_by_class"
INDEX_DEPLOYMENTS = "dap_deployments"
INDEX_SERVICES = "dap_services"
INDEX_CONFIGMAPS = "dap_configmaps"
INDEX_AUTOSCALERS = "dap_autoscalers"
INDEX_DATASTORES = "dap_datastores"
INDEX_DATASTORES_BY_SECRET = "dap_datastores_by_secret"
INDEX_CLAIMS = "dap_claims"
INDEX_CLAIMS_BY_WORKSPACE = "dap_claims_by_workspace"
INDEX_CLAIMS_BY_DATASTORE = "dap_claims_by_datastore"
INDEX_CLAIM_SECRETS = "dap_claim_secrets"
INDEX_SECRET_NAMES = "dap_secret_names"

_META_KEYS = ("name", "namespace", "uid", "generation", "labels", "annotations", "ownerReferences")


def trim(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an object the reconcilers read; ``managedFields`` and friends are dropped."""
    meta = body.get("metadata", {})
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in _META_KEYS if k in meta}}
    for key in ("spec", "status", "data", "type"):
        if key in body:
            out[key] = body[key]
    return out


def _key(body: Mapping[str, Any]) -> ObjectKey:
    meta = body.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


def key_object(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, dict[str, Any]]:
    return {_key(body): trim(body)}


def key_class(body: Mapping[str, Any], **_: Any) -> dict[str, dict[str, Any]]:
    return {body.get("metadata", {}).get("name", ""): trim(body)}


def key_workspace_by_class(body: Mapping[str, Any], **_: Any) -> dict[str, ObjectKey]:
    name = body.get("spec", {}).get("clusterClass")
    return {name: _key(body)} if name else {}


def key_child(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, dict[str, Any]]:
    """Children of a workspace are keyed by (namespace, workspace), from their label."""
    meta = body.get("metadata", {})
    workspace = meta.get("labels", {}).get(builders.LABEL_WORKSPACE)
    return {(meta.get("namespace", ""), workspace): trim(body)} if workspace else {}


def key_datastore_by_secret(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, ObjectKey]:
    namespace, _name = _key(body)
    secret = body.get("spec", {}).get("endpointSecretRef", {}).get("name")
    return {(namespace, secret): _key(body)} if secret else {}


def key_claim_by_workspace(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, ObjectKey]:
    namespace, _name = _key(body)
    workspace = body.get("spec", {}).get("workspace")
    return {(namespace, workspace): _key(body)} if workspace else {}


def key_claim_by_datastore(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, ObjectKey]:
    from dap.operator import claims

    namespace, _name = _key(body)
    datastore = body.get("spec", {}).get("datastore")
    return {claims.datastore_key(namespace, datastore): _key(body)} if datastore else {}


def key_secret_name(body: Mapping[str, Any], **_: Any) -> dict[ObjectKey, bool]:
    return {_key(body): True}


KEYERS: dict[str, Callable[..., Mapping[Any, Any]]] = {
    INDEX_CLASSES: key_class,
    INDEX_WORKSPACES: key_object,
    INDEX_WORKSPACES_BY_CLASS: key_workspace_by_class,
    INDEX_DEPLOYMENTS: key_child,
    INDEX_SERVICES: key_child,
    INDEX_CONFIGMAPS: key_child,
    INDEX_AUTOSCALERS: key_child,
    INDEX_DATASTORES: key_object,
    INDEX_DATASTORES_BY_SECRET: key_datastore_by_secret,
    INDEX_CLAIMS: key_object,
    INDEX_CLAIMS_BY_WORKSPACE: key_claim_by_workspace,
    INDEX_CLAIMS_BY_DATASTORE: key_claim_by_datastore,
    INDEX_CLAIM_SECRETS: key_object,
    INDEX_SECRET_NAMES: key_secret_name,
}

CHILD_INDEXES = {
    "Deployment": INDEX_DEPLOYMENTS,
    "Service": INDEX_SERVICES,
    "ConfigMap": INDEX_CONFIGMAPS,
    "HorizontalPodAutoscaler": INDEX_AUTOSCALERS,
}


class Caches:
    """Typed reads over kopf's indexes, with the recently-written overlay."""

    def __init__(self) -> None:
        self._indexes: dict[str, IndexMap] = {}
        self._recent: dict[tuple[str, str, str], dict[str, Any] | None] = {}

    def attach(self, indexes: Mapping[str, Any]) -> None:
        """Take kopf's index objects (from the startup handler's keyword arguments)."""
        for name in KEYERS:
            if name in indexes:
                self._indexes[name] = indexes[name]

    @property
    def attached(self) -> bool:
        return len(self._indexes) == len(KEYERS)

    def _one(self, index: str, key: Any) -> Any | None:
        store = self._indexes.get(index, {}).get(key)
        if not store:
            return None
        return next(iter(store))

    def _all(self, index: str, key: Any) -> list[Any]:
        return list(self._indexes.get(index, {}).get(key, ()))

    def cluster_class(self, name: str) -> bodies.ClusterClassBody | None:
        found: bodies.ClusterClassBody | None = self._one(INDEX_CLASSES, name)
        return found

    def workspace(self, key: ObjectKey) -> bodies.WorkspaceBody | None:
        found: bodies.WorkspaceBody | None = self._one(INDEX_WORKSPACES, key)
        return found

    def workspace_keys(self) -> list[ObjectKey]:
        return list(self._indexes.get(INDEX_WORKSPACES, {}))

    def workspaces_of_class(self, name: str) -> list[ObjectKey]:
        return self._all(INDEX_WORKSPACES_BY_CLASS, name)

    def child(self, kind: str, key: ObjectKey) -> dict[str, Any] | None:
        """The live child of a workspace: the overlay's answer if newer, else the index's."""
        if (kind, *key) in self._recent:
            return self._recent[(kind, *key)]
        found: dict[str, Any] | None = self._one(CHILD_INDEXES[kind], key)
        return found

    def datastore(self, key: ObjectKey) -> bodies.DatastoreBody | None:
        found: bodies.DatastoreBody | None = self._one(INDEX_DATASTORES, key)
        return found

    def datastores_using_secret(self, key: ObjectKey) -> list[ObjectKey]:
        return self._all(INDEX_DATASTORES_BY_SECRET, key)

    def claim(self, key: ObjectKey) -> bodies.ResourceClaimBody | None:
        found: bodies.ResourceClaimBody | None = self._one(INDEX_CLAIMS, key)
        return found

    def claims_of_workspace(self, key: ObjectKey) -> list[ObjectKey]:
        return self._all(INDEX_CLAIMS_BY_WORKSPACE, key)

    def claims_of_datastore(self, key: ObjectKey) -> list[ObjectKey]:
        return self._all(INDEX_CLAIMS_BY_DATASTORE, key)

    def claim_secret(self, key: ObjectKey) -> dict[str, Any] | None:
        if ("Secret", *key) in self._recent:
            return self._recent[("Secret", *key)]
        found: dict[str, Any] | None = self._one(INDEX_CLAIM_SECRETS, key)
        return found

    def secret_exists(self, key: ObjectKey) -> bool:
        return key in self._indexes.get(INDEX_SECRET_NAMES, {})

    def grants(self, key: ObjectKey) -> list[builders.ClaimGrant]:
        """Ready claims of a workspace, as its Deployment consumes them."""
        grants = []
        for claim_key in self.claims_of_workspace(key):
            claim = self.claim(claim_key)
            if claim is None:
                continue
            status = claim.get("status", {})
            if status.get("phase") == "Ready" and status.get("secretName"):
                grants.append(
                    builders.ClaimGrant(
                        claim=bodies.ClaimName(claim_key[1]),
                        datastore=claim.get("spec", {}).get("datastore", "").rpartition("/")[2],
                        secret=bodies.SecretName(str(status["secretName"])),
                        digest=str(status.get("secretDigest", "")),
                    )
                )
        return grants

    def remember(self, kind: str, key: ObjectKey, body: Mapping[str, Any] | None) -> None:
        """Record what the API answered to our write (``None``: we deleted it)."""
        self._recent[(kind, *key)] = trim(body) if body is not None else None

    def forget(self, kind: str, key: ObjectKey) -> None:
        """The watch caught up with this object: the index is authoritative again."""
        self._recent.pop((kind, *key), None)
