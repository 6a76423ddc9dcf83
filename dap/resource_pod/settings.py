"""Settings of one resource pod, beside the server's own ``ServeOptions``.

A frozen dataclass rather than click options threaded through: tests, ``dap dev`` and the
benchmark build pods directly with short intervals. The defaults are the spec's Limits: pull
every 10 s with ``--dev`` and every 5 min otherwise, health evidence every 30 s, metering every
5 min.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from dap.resource_pod import backoff, errors
from dap.resource_pod.documents import KeyId

DEV_PULL_INTERVAL = 10.0
PROD_PULL_INTERVAL = 300.0
HEALTH_INTERVAL = 30.0
METERING_INTERVAL = 300.0
MAX_LONG_POLL = 30.0  # the control plane clamps ``wait`` to its own maximum anyway

_WORKSPACE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Settings:
    control_url: str
    workspace: str
    state_dir: Path
    pull_interval: float = PROD_PULL_INTERVAL
    trusted_keys: Mapping[KeyId, bytes] = field(default_factory=dict)
    # The app's signing policy as given to the pod (not taken from the control): an artifact needs
    # ``policy_threshold`` approvals by distinct ``policy_keys`` (``dap.config.approvals``).
    policy_keys: Mapping[KeyId, bytes] = field(default_factory=dict)
    policy_threshold: int = 0
    dev: bool = False
    fetch_keys: bool = False  # trust GET /v1/keys (dev only)
    long_poll: bool = False  # GET /v1/snapshot?wait=: react at once to changes and /v1/poll
    cluster_id: str | None = None
    pod_name: str = ""
    health_interval: float = HEALTH_INTERVAL
    metering_interval: float = METERING_INTERVAL
    evidence_interval: float = 1.0  # how often buffered evidence is flushed
    evidence_capacity: int = 10_000
    request_timeout: float = 10.0
    clock_skew: timedelta = timedelta(seconds=30)
    # A failed artifact's retries; the pod uses it through ``artifact_retry``, capped at the interval.
    retry: backoff.Backoff = field(default_factory=lambda: backoff.Backoff(base=5.0, cap=300.0))
    evidence_retry: backoff.Backoff = field(default_factory=lambda: backoff.Backoff(base=1.0, cap=60.0))

    def __post_init__(self) -> None:
        if not self.control_url.startswith(("http://", "https://")):
            raise errors.ConfigError(
                f"--control-url {self.control_url!r} must be an http:// or https:// URL (CONTROL_CLUSTER_URL)"
            )
        if not _WORKSPACE.fullmatch(self.workspace):
            raise errors.ConfigError(
                f"--workspace-id {self.workspace!r} must be a workspace slug: a-z, 0-9 and '-' (WORKSPACE_ID)"
            )
        if self.pull_interval <= 0:
            raise errors.ConfigError("--pull-interval must be positive")
        if not self.trusted_keys and not self.fetch_keys:
            raise errors.ConfigError(
                "no trusted key: give --trusted-keys (DAP_TRUSTED_KEYS, hex ed25519 public keys), "
                "or use --dev to take the control plane's key from /v1/keys"
            )
        if not 0 <= self.policy_threshold <= len(self.policy_keys):
            raise errors.ConfigError(
                f"--policy-threshold {self.policy_threshold} must be between 0 and the number of "
                f"--policy-keys ({len(self.policy_keys)})"
            )
        if self.fetch_keys and not self.dev:
            raise errors.ConfigError("taking keys from the control plane is allowed with --dev only")

    @property
    def artifact_retry(self) -> backoff.Backoff:
        """``retry`` bounded by the pull interval: a refused artifact is fetched again at least as
        often as the snapshot is pulled, so the pod converges about one interval after the honest
        artifact is served again, however many refusals came before."""
        return self.retry.within(self.pull_interval)

    @property
    def long_poll_wait(self) -> float:
        return min(self.pull_interval, MAX_LONG_POLL) if self.long_poll else 0.0
