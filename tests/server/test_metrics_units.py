"""The request metrics' exposition: the counts and buckets prometheus_client's own types would give."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from dap.server import metrics

ROUTE = "/{ws}/api/{module}/{entity}"


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_observations_expose_like_prometheus_client_histogram() -> None:
    meter = metrics.Metrics()
    reference = CollectorRegistry()
    histogram = Histogram(
        "dap_http_request_duration_seconds",
        "Time to answer an HTTP request",
        list(metrics.LABELS),
        buckets=metrics.BUCKETS,
        registry=reference,
    )
    # on the bounds (le is inclusive), between them, past the last one, and two label sets
    observations = [0.0, 0.001, 0.0011, 0.005, 0.25, 0.2500001, 9.99, 10.0, 11.0, 60.0]
    for seconds in observations:
        meter.observe(
            workspace="w", route="/{ws}/api/{module}/{entity}", method="GET", status=200, seconds=seconds
        )
        histogram.labels("w", ROUTE, "GET", "2xx").observe(seconds)
    meter.observe(workspace="w", route="unmatched", method="POST", status=404, seconds=0.002)
    histogram.labels("w", "unmatched", "POST", "4xx").observe(0.002)

    ours = _samples(meter.exposition())
    theirs = _samples(metrics.generate_latest(reference))
    assert {k: v for k, v in ours.items() if k[0].startswith("dap_http_request_duration")} == theirs
    labels = (
        ("method", "GET"),
        ("route", "/{ws}/api/{module}/{entity}"),
        ("status_class", "2xx"),
        ("workspace", "w"),
    )
    assert ours[("dap_http_requests_total", labels)] == len(observations)
    assert ours[("dap_http_request_duration_seconds_bucket", (("le", "0.001"), *labels))] == 2
    assert ours[("dap_http_request_duration_seconds_bucket", (("le", "10.0"), *labels))] == 8
    assert ours[("dap_http_request_duration_seconds_count", labels)] == len(observations)
    assert meter.requests_of("w") == len(observations) + 1  # what the resource pod reports
    assert meter.requests_of("other") == 0
