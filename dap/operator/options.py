"""The options of one operator instance, kept apart so that the kopf handlers can name them
without importing the runtime that registers those handlers."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

from dap.operator import reporting

DEFAULT_RESOURCE_IMAGE = "ghcr.io/dap-platform/dap:0.1.0"
# ``--resource-image`` left empty: the resource pods run the operator's own image, read from its
# Pod (POD_NAME, POD_NAMESPACE from the downward API). The image of a Deployment is what
# kustomize's ``images:`` rewrites; an argument it cannot see, so a pinned argument would drift.
SAME_IMAGE = ""
PEERING_NAME = "dap-operator"  # kopf's peering object of --leader-elect


@dataclasses.dataclass(frozen=True)
class Options:
    """The options of ``dap operator`` (spec: "Process options: Operator"), plus test hooks."""

    control_cluster_url: str = ""
    leader_elect: bool = False
    metrics_bind_address: str = ":8443"
    health_probe_bind_address: str = ":8081"
    workspace_concurrency: int = 10
    namespace: str = ""
    resource_image: str = DEFAULT_RESOURCE_IMAGE  # SAME_IMAGE: the operator's own
    pod_env_secret: str = ""
    insecure_skip_signature_verify: bool = False
    # Development mode: grant unsigned claims on local datastores at once (claims.is_local).
    dev_auto_grant_claims: bool = False
    cluster_name: str = "default"
    node_name: str = dataclasses.field(
        default_factory=lambda: os.environ.get("NODE_NAME") or socket.gethostname()
    )
    report_interval: float = reporting.NODE_HEALTH_INTERVAL
    keys_refresh_interval: float = 60.0
    # How often the pods' /health is read for refused artifacts (podhealth); 0 disables.
    pod_health_interval: float = 10.0
    watch_server_timeout: int = 300
    # Test and benchmark hook: talk to this API server URL without credentials (kmock).
    server: str = ""


def own_image(pod: Mapping[str, Any], container: str = "operator") -> str | None:
    """The image the operator's container runs, from its Pod: the container named ``container``,
    else the only one; None when neither tells."""
    containers = list((pod.get("spec") or {}).get("containers") or [])
    named = [c for c in containers if c.get("name") == container]
    chosen = named or (containers if len(containers) == 1 else [])
    image = chosen[0].get("image") if chosen else None
    return str(image) if image else None


def default_resource_image(environ: Mapping[str, str]) -> str:
    """Without ``--resource-image``: the operator's own image where it runs in a pod (resolved
    at login, ``own_image``), else the released image."""
    in_pod = environ.get("POD_NAME") and environ.get("POD_NAMESPACE")
    return SAME_IMAGE if in_pod else DEFAULT_RESOURCE_IMAGE
