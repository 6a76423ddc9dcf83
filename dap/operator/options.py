"""The options of one operator instance, kept apart so that the kopf handlers can name them
without importing the runtime that registers those handlers."""

from __future__ import annotations

import dataclasses
import os
import socket

from dap.operator import reporting

DEFAULT_RESOURCE_IMAGE = "ghcr.io/dap-platform/dap:0.1.0"
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
    resource_image: str = DEFAULT_RESOURCE_IMAGE
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
