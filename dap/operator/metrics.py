"""Prometheus metrics of the operator, in one registry per operator instance.

Names follow ARCHITECTURE.md (``dap_`` prefix, unit in the name); labels are bounded: the
controller (``workspace``, ``datastore``, ``resourceclaim``), the API verb, the HTTP status
class, the report endpoint, the workspace phase. A registry per instance (not the global default)
lets tests run several operators in one process and read exact numbers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTROLLERS = ("workspace", "datastore", "resourceclaim")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconcile_total = Counter(
            "dap_reconcile_total", "Reconciles run, per controller.", ["controller"], registry=self.registry
        )
        self.reconcile_errors_total = Counter(
            "dap_reconcile_errors_total",
            "Reconciles that failed, per controller.",
            ["controller"],
            registry=self.registry,
        )
        self.reconcile_duration_seconds = Histogram(
            "dap_reconcile_duration_seconds",
            "Time spent in one reconcile, per controller.",
            ["controller"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
        )
        self.workqueue_depth = Gauge(
            "dap_workqueue_depth",
            "Reconciles waiting for a slot or a retry, per controller.",
            ["controller"],
            registry=self.registry,
        )
        self.kube_requests_total = Counter(
            "dap_kube_requests_total",
            "Kubernetes API requests made by the operator, per verb and status class.",
            ["verb", "code"],
            registry=self.registry,
        )
        self.reports_total = Counter(
            "dap_reports_total",
            "Reports sent to the control plane, per endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.claims_dev_auto_granted_total = Counter(
            "dap_claims_dev_auto_granted_total",
            "ResourceClaims granted without a valid owner signature by --dev-auto-grant-claims.",
            registry=self.registry,
        )
        self.workspaces = Gauge("dap_workspaces", "Workspaces per phase.", ["phase"], registry=self.registry)
        for controller in CONTROLLERS:
            self.reconcile_total.labels(controller)
            self.reconcile_errors_total.labels(controller)
            self.workqueue_depth.labels(controller).set(0)

    def observe_request(self, verb: str, status: int) -> None:
        code = f"{status // 100}xx" if status else "error"
        self.kube_requests_total.labels(verb, code).inc()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
