"""Prometheus metrics of the server, exposed on the admin listener's ``/metrics`` (unless
``--no-metrics``: then 404 ``OBSERVABILITY_METRICS_DISABLED``).

Names follow ARCHITECTURE.md: prefix ``dap_``, unit in the name, bounded labels only
(workspace slug, route template, status class — never ids). Each application gets its own
``CollectorRegistry`` rather than the global one, so that several servers in one process (tests,
the resource pod's atomic swap) never collide on metric names. Pool usage is read at scrape time
by a custom collector instead of being updated on every acquire, and so are its waits (counted by
the pool's queue only when a caller has to wait). Per-workspace request and error rates are
``rate()`` of ``dap_http_requests_total`` by ``workspace`` and ``status_class``; the events'
counters and lag histogram are ``events.measures``'.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PoolStats = Callable[[], tuple[int, int, int]]  # (size, idle, max)
PoolWaits = Callable[[], tuple[int, int, float]]  # (waiting now, waits so far, seconds waited so far)
LABELS = ("workspace", "route", "method", "status_class")
_STATUS_CLASSES = tuple(f"{n}xx" for n in range(10))
_BOUNDS = tuple(repr(float(b)) for b in BUCKETS)  # ``le`` as prometheus_client writes it: 0.001, 1.0


class _PoolCollector(Collector):
    def __init__(self, stats: PoolStats, waits: PoolWaits | None) -> None:
        self._stats = stats
        self._waits = waits

    def collect(self) -> Iterator[Metric]:
        size, idle, maximum = self._stats()
        yield GaugeMetricFamily("dap_db_pool_connections", "Open connections of the pool", value=size)
        yield GaugeMetricFamily("dap_db_pool_idle_connections", "Idle connections of the pool", value=idle)
        yield GaugeMetricFamily("dap_db_pool_in_use_connections", "Busy connections", value=size - idle)
        yield GaugeMetricFamily("dap_db_pool_max_connections", "Pool maximum size", value=maximum)
        if self._waits is not None:
            waiting, waits, seconds = self._waits()
            yield GaugeMetricFamily(
                "dap_db_pool_waiting", "Callers queued for a connection now", value=waiting
            )
            yield CounterMetricFamily(
                "dap_db_pool_waits", "Acquires that had to queue for a connection", value=waits
            )
            yield CounterMetricFamily(
                "dap_db_pool_wait_seconds", "Time callers spent queued for a connection", value=seconds
            )


class _BacklogCollector(Collector):
    """Gauges read from Postgres just before a scrape (``Metrics.backlog``, set by the admin
    listener): the outbox's undelivered events and the age of the oldest (the event lag), the jobs
    queued and running. Absent until the first successful reading."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def collect(self) -> Iterator[Metric]:
        values = dict(self.values)
        for name, text in BACKLOG.items():
            if name in values:
                yield GaugeMetricFamily(name, text, value=values[name])


BACKLOG = {
    "dap_events_pending": "Outbox events not yet delivered (every tenant)",
    "dap_events_oldest_pending_seconds": "Age of the oldest undelivered outbox event: the event lag",
    "dap_events_slot_retained_bytes": "WAL kept by the events' replication slot (DAP_EVENTS_SOURCE=wal)",
    "dap_events_slots_lost": "Events' replication slots Postgres invalidated (max_slot_wal_keep_size)",
    "dap_jobs_queued": "Jobs waiting for a worker (the job queue depth)",
    "dap_jobs_running": "Jobs a worker runs now",
}


class _Series:
    """The requests of one label set: a count per bucket (the last past every bound) and their sum."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0


class _RequestCollector(Collector):
    """``dap_http_requests_total`` and ``dap_http_request_duration_seconds``, kept as plain numbers.

    prometheus_client's ``Counter`` and ``Histogram`` take a lock per update, for threads; every
    request updates both, and all of them run on the one event loop thread that also scrapes.
    Here an update is a list increment, and the exposition is built from the numbers at scrape time.
    """

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, str, str], _Series] = {}

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("dap_http_requests", "HTTP requests answered", labels=LABELS)
        duration = HistogramMetricFamily(
            "dap_http_request_duration_seconds", "Time to answer an HTTP request", labels=LABELS
        )
        for labels, series in list(self.series.items()):
            counts, seconds = list(series.counts), series.seconds  # one consistent reading
            running, buckets = 0, []
            for bound, count in zip((*_BOUNDS, "+Inf"), counts, strict=True):
                running += count
                buckets.append((bound, running))
            requests.add_metric(labels, running)
            duration.add_metric(labels, buckets, seconds)
        yield requests
        yield duration


class Metrics:
    """The HTTP and pool metrics of one server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = _RequestCollector()
        self.registry.register(self._requests)
        self._backlog = _BacklogCollector()
        self.registry.register(self._backlog)

    def watch_pool(self, stats: PoolStats, waits: PoolWaits | None = None) -> None:
        self.registry.register(_PoolCollector(stats, waits))

    def backlog(self, values: dict[str, float]) -> None:
        """The Postgres-read gauges (names of ``BACKLOG``) as of now."""
        self._backlog.values = {k: v for k, v in values.items() if k in BACKLOG}

    def observe(self, *, workspace: str, route: str, method: str, status: int, seconds: float) -> None:
        labels = (workspace, route, method, _STATUS_CLASSES[status // 100])
        series = self._requests.series.get(labels)
        if series is None:
            series = self._requests.series[labels] = _Series()
        series.counts[bisect_left(BUCKETS, seconds)] += 1  # the first bound >= seconds: le is inclusive
        series.seconds += seconds

    def requests_of(self, workspace: str) -> int:
        """Requests answered for ``workspace`` since the server started (all routes, all statuses)."""
        series = list(self._requests.series.items())
        return sum(sum(s.counts) for labels, s in series if labels[0] == workspace)

    def per_workspace(self) -> dict[str, dict[str, int]]:
        """Requests and errors (4xx, 5xx) answered per workspace since the server started."""
        counts: dict[str, dict[str, int]] = {}
        for (workspace, _route, _method, status_class), series in list(self._requests.series.items()):
            found = counts.setdefault(workspace, {"requests": 0, "client_errors": 0, "server_errors": 0})
            n = sum(series.counts)
            found["requests"] += n
            if status_class == "4xx":
                found["client_errors"] += n
            elif status_class == "5xx":
                found["server_errors"] += n
        return counts

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
