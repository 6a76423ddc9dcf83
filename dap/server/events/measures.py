"""The events' Prometheus counters, per channel: emitted, delivered, retried, dead.

A delivery counts ``emitted`` on its first try and then exactly one of ``delivered`` or ``dead``
when it settles, so once the outbox is drained ``delivered + dead = emitted`` per channel;
``retried`` counts failed tries that will be repeated (with ``dead``: the delivery failures);
``dap_events_delivery_lag_seconds`` is the time from the event's commit to its delivery.
``dap_events_stream_total`` counts what the walsender stream (``DAP_EVENTS_SOURCE=wal``) did
besides reading, per ``what``: ``opened``, ``ended`` (on its own, e.g. its connection lost),
``busy`` (a start refused: another walsender holds the slot) and ``held`` (its queue full for
more than a second): a stalled stream shows there.
Counters live in the registry they are given (the server's), as ``dap.server.metrics`` does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# seconds from the event's commit to its delivery: a retry's backoff reaches minutes
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class Counters:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()

        def counter(name: str, text: str) -> Counter:
            return Counter(f"dap_events_{name}_total", text, ["channel"], registry=registry)

        self.emitted = counter("emitted", "Event deliveries tried for the first time")
        self.delivered = counter("delivered", "Event deliveries that succeeded")
        self.retried = counter("retried", "Event delivery tries that failed and will be repeated")
        self.dead = counter("dead", "Event deliveries given up and written to the dead letter")
        self.lag = Histogram(
            "dap_events_delivery_lag_seconds",
            "Time from an event's commit to its successful delivery",
            ["channel"],
            registry=registry,
            buckets=LAG_BUCKETS,
        )
        self.stream = Counter(
            "dap_events_stream_total",
            "What the events' walsender stream did besides reading: opened, ended, busy, held",
            ["what"],
            registry=registry,
        )
