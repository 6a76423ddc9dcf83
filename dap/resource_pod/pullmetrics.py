"""The pod's pull and convergence state on its ``/metrics``: what an operator asks of a pod.

"Is this pod on the version it should be, and when did it last hear from its control?" The
pull loop (``pulling``) counts each snapshot pull's result and each refused document in a
:class:`PullStats`; :class:`Collector` turns those and the convergence ``Status`` into series at
scrape time, on the server's own registry (so ``--no-metrics`` turns them off with the rest):

=============================================  =======  ==========================================
``dap_pod_pulls_total{workspace,result}``      counter  snapshot pulls: ``changed`` (a new one),
                                                        ``unchanged`` (304), ``unreachable``,
                                                        ``invalid`` (an answer it cannot use)
``dap_pod_last_pull_timestamp_seconds``        gauge    when the last pull ended (Unix time)
``dap_pod_last_pull_success``                  gauge    1 when it reached the control, else 0
``dap_pod_snapshot_version``                   gauge    the snapshot's version the pod acts on
``dap_pod_artifact_version``                   gauge    the served artifact's version (absent: none)
``dap_pod_converged``                          gauge    1 when it serves what the snapshot names
``dap_pod_phase{workspace,phase}``             gauge    1 for the current phase, 0 for the others
``dap_pod_artifact_failures``                  gauge    failures in a row of the wanted artifact
``dap_pod_verification_failures_total{kind}``  counter  refused documents by kind (``signature``,
                                                        ``rollback``, ``freeze``, ``log``, …)
=============================================  =======  ==========================================

Labels stay bounded: the pod's one workspace, four results, six phases, the violation kinds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as _Collector

from dap.resource_pod import converging

RESULTS = ("changed", "unchanged", "unreachable", "invalid")
REACHED = frozenset({"changed", "unchanged"})


@dataclass
class PullStats:
    """Counts the pull loop keeps; read by :class:`Collector` at scrape time."""

    pulls: Counter[str] = field(default_factory=Counter)
    last_result: str | None = None
    last_at: float | None = None  # Unix time
    refused: Counter[str] = field(default_factory=Counter)

    def pulled(self, result: str) -> None:
        self.pulls[result] += 1
        self.last_result, self.last_at = result, time.time()

    def violation(self, kind: str) -> None:
        self.refused[kind] += 1


def converged(status: converging.Status) -> bool:
    """Whether the pod serves what its snapshot names: up to date, or the target loaded and serving."""
    if status.running is None or status.phase not in (converging.Phase.UP_TO_DATE, converging.Phase.LOADED):
        return False
    return status.target is None or status.target["artifact_id"] == status.running.artifact_id


class Collector(_Collector):
    """The series of the module's table for one pod's workspace."""

    def __init__(self, workspace: str, stats: PullStats, status: Callable[[], converging.Status]) -> None:
        self.workspace = workspace
        self.stats = stats
        self.status = status

    def collect(self) -> Iterator[Metric]:
        ws, stats, status = self.workspace, self.stats, self.status()
        pulls = CounterMetricFamily(
            "dap_pod_pulls", "Snapshot pulls by result", labels=["workspace", "result"]
        )
        for result in RESULTS:
            pulls.add_metric([ws, result], stats.pulls[result])
        yield pulls
        if stats.last_at is not None:
            yield _gauge("dap_pod_last_pull_timestamp_seconds", "When the last pull ended", ws, stats.last_at)
            reached = 1.0 if stats.last_result in REACHED else 0.0
            yield _gauge("dap_pod_last_pull_success", "1 when the last pull reached the control", ws, reached)
        if status.snapshot_version is not None:
            yield _gauge(
                "dap_pod_snapshot_version", "The snapshot version acted on", ws, status.snapshot_version
            )
        if status.running is not None:
            yield _gauge(
                "dap_pod_artifact_version", "The served artifact's version", ws, status.running.version
            )
        yield _gauge(
            "dap_pod_converged", "1 when the pod serves what the snapshot names", ws, converged(status)
        )
        phases = GaugeMetricFamily("dap_pod_phase", "The convergence phase", labels=["workspace", "phase"])
        for phase in converging.Phase:
            phases.add_metric([ws, str(phase)], 1.0 if status.phase is phase else 0.0)
        yield phases
        failures = status.failure.count if status.failure is not None else 0
        yield _gauge("dap_pod_artifact_failures", "Failures in a row of the wanted artifact", ws, failures)
        refused = CounterMetricFamily(
            "dap_pod_verification_failures", "Refused documents by kind", labels=["workspace", "kind"]
        )
        for kind, count in sorted(stats.refused.items()):
            refused.add_metric([ws, kind], count)
        yield refused


def _gauge(name: str, text: str, workspace: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, text, labels=["workspace"])
    gauge.add_metric([workspace], float(value))
    return gauge
