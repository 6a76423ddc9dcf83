"""Prometheus metrics of the server, exposed on the admin listener's ``/metrics``.

Names follow ARCHITECTURE.md: prefix ``dap_``, unit in the name, bounded labels only
(workspace slug, route template, status class — never ids). Each application gets its own
``CollectorRegistry`` rather than the global one, so that several servers in one process (tests,
the resource pod's atomic swap) never collide on metric names. Pool usage is read at scrape time
by a custom collector instead of being updated on every acquire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PoolStats = Callable[[], tuple[int, int, int]]  # (size, idle, max)


class _PoolCollector(Collector):
    def __init__(self, stats: PoolStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        size, idle, maximum = self._stats()
        yield GaugeMetricFamily("dap_db_pool_connections", "Open connections of the pool", value=size)
        yield GaugeMetricFamily("dap_db_pool_idle_connections", "Idle connections of the pool", value=idle)
        yield GaugeMetricFamily("dap_db_pool_in_use_connections", "Busy connections", value=size - idle)
        yield GaugeMetricFamily("dap_db_pool_max_connections", "Pool maximum size", value=maximum)


class Metrics:
    """The HTTP and pool metrics of one server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "dap_http_requests_total",
            "HTTP requests answered",
            ["workspace", "route", "method", "status_class"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "dap_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["workspace", "route", "method", "status_class"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._children: dict[tuple[str, ...], tuple[Any, Any]] = {}

    def watch_pool(self, stats: PoolStats) -> None:
        self.registry.register(_PoolCollector(stats))

    def observe(self, *, workspace: str, route: str, method: str, status: int, seconds: float) -> None:
        labels = (workspace, route, method, f"{status // 100}xx")
        children = self._children.get(labels)
        if children is None:  # labels() is a locked dict lookup; keep the pair per label set
            children = self._children[labels] = (self.requests.labels(*labels), self.duration.labels(*labels))
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
