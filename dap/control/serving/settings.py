"""Settings of one control process, gathered by the CLI and read by every handler.

A frozen dataclass rather than click options threaded through: tests and the benchmark build
apps directly with short intervals, without going through the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from dap.control.artifacts import registration
from dap.control.ids import ClusterId

Mode = Literal["region", "cluster", "standalone"]
DEFAULT_CLUSTER = ClusterId("local")
MODES: tuple[Mode, ...] = ("region", "cluster", "standalone")


@dataclass(frozen=True)
class Settings:
    mode: Mode = "standalone"
    dev: bool = False
    environment: str = "production"
    snapshot_ttl: timedelta = timedelta(hours=1)
    limits: registration.Limits = field(default_factory=registration.Limits)
    long_poll_max_seconds: float = 30.0
    # how often a serving control ends freezes past their end and re-checks promotions
    freeze_check_interval: float = 5.0
    # cluster mode
    region_url: str | None = None
    cluster_id: ClusterId = DEFAULT_CLUSTER
    labels: Mapping[str, str] = field(default_factory=dict)
    max_workspaces: int = 100
    sync_interval: float = 30.0
    relay_interval: float = 60.0
    relay_batch: int = 500
    trusted_keys: tuple[bytes, ...] = ()
    upstream_timeout: float = 10.0

    @property
    def max_body_bytes(self) -> int:
        """Largest request body: the total limit in base64 (JSON bodies) plus room for the rest."""
        return self.limits.max_total_bytes * 4 // 3 + 1024 * 1024

    @property
    def accepts_artifacts(self) -> bool:
        return self.mode in ("region", "standalone")

    @property
    def polls(self) -> bool:
        return self.mode == "standalone" and self.dev
