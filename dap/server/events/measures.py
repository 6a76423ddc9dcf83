"""The events' Prometheus counters, per channel: emitted, delivered, retried, dead.

A delivery counts ``emitted`` on its first try and then exactly one of ``delivered`` or ``dead``
when it settles, so once the outbox is drained ``delivered + dead = emitted`` per channel;
``retried`` counts failed tries that will be repeated. Counters live in the registry they are
given (the server's), as ``dap.server.metrics`` does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class Counters:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()

        def counter(name: str, text: str) -> Counter:
            return Counter(f"dap_events_{name}_total", text, ["channel"], registry=registry)

        self.emitted = counter("emitted", "Event deliveries tried for the first time")
        self.delivered = counter("delivered", "Event deliveries that succeeded")
        self.retried = counter("retried", "Event delivery tries that failed and will be repeated")
        self.dead = counter("dead", "Event deliveries given up and written to the dead letter")
