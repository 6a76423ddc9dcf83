"""Reports to the cluster control plane: node health every 15 s, workspace status on change.

Bodies (ARCHITECTURE.md, "Operator reports")::

    POST /v1/node-health       {"cluster", "node", "status", "workspaces", "cpu", "memory", "at"}
    POST /v1/workspace-status  {"cluster", "workspace", "phase", "conditions", "at"}

The specification's rule is that reporting never blocks reconciling. So the reconcilers only call
``Reporter.workspace_changed``, which records the latest status per workspace in a dict and wakes
the sender; one background task posts them (older unsent statuses of the same workspace are
superseded, never queued up). A failed post is kept for the next round, and failures are logged
at most once per ``LOG_EVERY`` seconds per endpoint with the count of the suppressed ones.

The body builders and the /proc parsers are pure functions; the ``Reporter`` is the I/O shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypedDict

import aiohttp

from dap.operator import bodies
from dap.operator.metrics import Metrics

logger = logging.getLogger(__name__)

NODE_HEALTH_INTERVAL = 15.0
LOG_EVERY = 60.0
NodeStatus = Literal["healthy", "degraded"]


class NodeHealth(TypedDict):
    cluster: str
    node: str
    status: NodeStatus
    workspaces: int
    cpu: float
    memory: float
    at: str


class WorkspaceStatusReport(TypedDict):
    cluster: str
    workspace: str
    phase: str
    conditions: list[bodies.Condition]
    at: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def cpu_load(loadavg: str, cpus: int) -> float:
    """One-minute load average per CPU, from the text of /proc/loadavg."""
    try:
        return round(float(loadavg.split()[0]) / max(cpus, 1), 3)
    except (IndexError, ValueError):
        return 0.0


def memory_used(meminfo: str) -> float:
    """Fraction of memory in use (1 - MemAvailable/MemTotal), from the text of /proc/meminfo."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0])
    total, available = values.get("MemTotal", 0), values.get("MemAvailable", 0)
    return round(1 - available / total, 3) if total else 0.0


def node_status(phases: Mapping[str, str]) -> NodeStatus:
    """Degraded while any workspace here is Degraded or Failed; healthy otherwise."""
    return "degraded" if any(p in ("Degraded", "Failed") for p in phases.values()) else "healthy"


def node_health_body(
    *, cluster: str, node: str, phases: Mapping[str, str], cpu: float, memory: float, at: str
) -> NodeHealth:
    return {
        "cluster": cluster,
        "node": node,
        "status": node_status(phases),
        "workspaces": len(phases),
        "cpu": cpu,
        "memory": memory,
        "at": at,
    }


def workspace_status_body(
    *, cluster: str, workspace: str, phase: str, conditions: Sequence[bodies.Condition], at: str
) -> WorkspaceStatusReport:
    return {
        "cluster": cluster,
        "workspace": workspace,
        "phase": phase,
        "conditions": list(conditions),
        "at": at,
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


@dataclasses.dataclass
class _LogLimiter:
    """At most one warning per ``every`` seconds per key, counting the ones it swallowed."""

    every: float = LOG_EVERY
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, float] = dataclasses.field(default_factory=dict)
    _suppressed: dict[str, int] = dataclasses.field(default_factory=dict)

    def warn(self, key: str, message: str) -> None:
        now = self.clock()
        if now - self._last.get(key, -self.every) >= self.every:
            skipped = self._suppressed.pop(key, 0)
            extra = f" ({skipped} similar failures not logged)" if skipped else ""
            logger.warning(message + extra, extra={"ctx": {"endpoint": key}})
            self._last[key] = now
        else:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1


class Reporter:
    """Sends the reports in the background; ``workspace_changed`` never waits."""

    def __init__(
        self,
        *,
        control_url: str,
        cluster: str,
        node: str,
        metrics: Metrics,
        interval: float = NODE_HEALTH_INTERVAL,
    ) -> None:
        self.control_url = control_url.rstrip("/")
        self.cluster = cluster
        self.node = node
        self.interval = interval
        self._metrics = metrics
        # Keyed by (namespace, name): equal names in two namespaces are two workspaces.
        self._phases: dict[tuple[str, str], str] = {}
        self._sent: dict[tuple[str, str], tuple[str, str]] = {}
        self._pending: dict[tuple[str, str], WorkspaceStatusReport] = {}
        self._wake = asyncio.Event()
        self._limiter = _LogLimiter()

    @property
    def enabled(self) -> bool:
        return bool(self.control_url)

    def workspace_changed(
        self, workspace: tuple[str, str], phase: str, conditions: Sequence[bodies.Condition]
    ) -> None:
        """Record the workspace's status; it is posted if it differs from the last one posted."""
        self._phases[workspace] = phase
        self._metrics.workspaces.clear()
        for value in set(self._phases.values()):
            self._metrics.workspaces.labels(value).set(sum(1 for p in self._phases.values() if p == value))
        fingerprint = (phase, repr([(c["type"], c["status"], c["reason"]) for c in conditions]))
        if self._sent.get(workspace) == fingerprint or not self.enabled:
            return
        self._pending[workspace] = workspace_status_body(
            cluster=self.cluster, workspace=workspace[1], phase=phase, conditions=conditions, at=now_iso()
        )
        self._wake.set()

    def forget(self, workspace: tuple[str, str]) -> None:
        self._phases.pop(workspace, None)
        self._sent.pop(workspace, None)
        self._pending.pop(workspace, None)

    def node_health(self) -> NodeHealth:
        return node_health_body(
            cluster=self.cluster,
            node=self.node,
            phases={f"{ns}/{name}": phase for (ns, name), phase in self._phases.items()},
            cpu=cpu_load(_read("/proc/loadavg"), os.cpu_count() or 1),
            memory=memory_used(_read("/proc/meminfo")),
            at=now_iso(),
        )

    async def _post(self, session: aiohttp.ClientSession, endpoint: str, body: Mapping[str, Any]) -> bool:
        url = f"{self.control_url}{endpoint}"
        try:
            async with session.post(url, json=body) as response:
                if response.status >= 300:
                    text = (await response.text())[:200]
                    raise aiohttp.ClientResponseError(
                        response.request_info, (), status=response.status, message=text
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._metrics.reports_total.labels(endpoint, "failure").inc()
            self._limiter.warn(endpoint, f"report to {url} failed: {exc!r}")
            return False
        self._metrics.reports_total.labels(endpoint, "success").inc()
        return True

    async def run(self) -> None:
        """Post node health every ``interval`` and workspace statuses as they change."""
        if not self.enabled:
            logger.warning("no --control-cluster-url: reports to the control plane are disabled")
            return
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            next_health = 0.0
            while True:
                now = time.monotonic()
                if now >= next_health:
                    await self._post(session, "/v1/node-health", self.node_health())
                    next_health = now + self.interval
                pending, self._pending = self._pending, {}
                self._wake.clear()
                for workspace, body in pending.items():
                    if await self._post(session, "/v1/workspace-status", body):
                        conds = body["conditions"]
                        self._sent[workspace] = (
                            body["phase"],
                            repr([(c["type"], c["status"], c["reason"]) for c in conds]),
                        )
                    else:
                        self._pending.setdefault(workspace, body)  # retried next round
                delay = max(next_health - time.monotonic(), 0.05)
                if self._pending:
                    delay = min(delay, 2.0)  # failed posts: retry soon, not in a tight loop
                    await asyncio.sleep(delay)
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):  # not wait_for: 3.11 loses a stop there
                        await self._wake.wait()
