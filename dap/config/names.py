"""Names shared by every part of dap: API groups, annotations, labels, environment variables.

The operator depends on dap/config for these names only; keeping them in one module means a
renamed annotation cannot drift between the operator that writes it and the pod that reads it.
"""

from __future__ import annotations

from typing import Final

MANIFEST_API_VERSION: Final = "dap.io/v1"

CRD_GROUP: Final = "dap.io"
CRD_VERSION: Final = "v1alpha1"
CRD_API_VERSION: Final = f"{CRD_GROUP}/{CRD_VERSION}"

ANNOTATION_IDLE: Final = f"{CRD_GROUP}/idle"
ANNOTATION_ARTIFACT_BINARY_HASH: Final = f"{CRD_GROUP}/artifact-binary-hash"
NODE_LABEL_PREFIX: Final = f"{CRD_GROUP}/"

ENV_CONTROL_CLUSTER_URL: Final = "CONTROL_CLUSTER_URL"
ENV_WORKSPACE_ID: Final = "WORKSPACE_ID"
ENV_TRUSTED_KEYS: Final = "DAP_TRUSTED_KEYS"

DEFAULT_WORKSPACE: Final = "default"
# First URL path segments that can never be a workspace slug.
RESERVED_SLUGS: Final = frozenset(
    {"_ui", "api", "_admin", "assets", "health", "login", "register", "_ws", "print"}
)

WORKSPACE_PHASES: Final = ("Pending", "Progressing", "Ready", "Degraded", "Idle", "Failed")
