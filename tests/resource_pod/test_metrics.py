"""A pod's pull and convergence state on its ``/metrics`` (issue 45), scraped from a real ``dap pod``
process: converged on the registered version; the control gone (the last pull failed, still
converged); the control back with a key the pod does not trust (a refused snapshot counted by kind)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dap.control.trust import signing
from tests.devsessions import free_port
from tests.resource_pod.conftest import SECRET, WORKSPACE, Control, MakeDsn, spec_files, wait_for
from tests.resource_pod.test_commands import process

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(http: aiohttp.ClientSession, url: str) -> Samples:
    async with http.get(url) as response:
        text = await response.text()
        assert response.status == 200, f"{url}: {response.status} {text[:300]}"
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"workspace": WORKSPACE, **labels}.items()))))


async def until(
    http: aiohttp.ClientSession, url: str, check: Callable[[Samples], bool], what: str
) -> Samples:
    """Scrape ``url`` until ``check`` holds of its samples; those samples."""
    seen: list[Samples] = []

    async def holds() -> bool:
        try:
            samples = await scrape(http, url)
        except aiohttp.ClientError:  # the admin listener is not up yet
            return False
        seen.append(samples)
        return check(samples)

    try:
        await wait_for(holds, within=30, what=what)
    except AssertionError as exc:
        pod = {k: v for k, v in (seen[-1] if seen else {}).items() if k[0].startswith("dap_pod")}
        raise AssertionError(f"{exc}; the pod's last series: {pod}") from None
    return seen[-1]


async def test_a_pods_metrics_show_pulls_convergence_and_refusals(
    control: Control, make_dsn: MakeDsn, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(spec_files())
    admin = free_port()
    env = {
        "CONTROL_CLUSTER_URL": control.url,
        "WORKSPACE_ID": WORKSPACE,
        "DAP_TRUSTED_KEYS": control.signer.public_key.hex(),
        "DAP_DSN": await make_dsn(),
    }
    args = (
        "--jwt-secret",
        SECRET,
        "--cors-origin",
        "http://ui.example",
        "--addr",
        f"127.0.0.1:{free_port()}",
        "--metrics-addr",
        f"127.0.0.1:{admin}",
    )
    metrics = f"http://127.0.0.1:{admin}/metrics"
    started = time.time()
    async with process(
        "pod", *args, "--pull-interval", "200ms", "--state-dir", str(tmp_path), env=env
    ) as child:
        try:
            samples = await until(
                http, metrics, lambda s: value(s, "dap_pod_converged") == 1, "the pod converged on v1"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe pod's stderr:\n{child.stderr.decode()[-3000:]}") from None
        assert value(samples, "dap_pod_artifact_version") == v1["version"]
        assert (value(samples, "dap_pod_snapshot_version") or 0) >= 1
        assert value(samples, "dap_pod_pulls_total", result="changed") == 1  # one snapshot, then 304s
        assert value(samples, "dap_pod_last_pull_success") == 1
        assert (value(samples, "dap_pod_last_pull_timestamp_seconds") or 0) >= started
        assert value(samples, "dap_pod_artifact_failures") == 0
        phases = {p: value(samples, "dap_pod_phase", phase=p) for p in ("up_to_date", "loaded", "failed")}
        assert (phases["failed"] == 0 and phases["up_to_date"]) or phases["loaded"]

        await control.stop()  # the control goes away: the pod keeps serving v1
        samples = await until(
            http, metrics, lambda s: value(s, "dap_pod_last_pull_success") == 0, "a failed pull counted"
        )
        assert (value(samples, "dap_pod_pulls_total", result="unreachable") or 0) >= 1
        assert value(samples, "dap_pod_converged") == 1

        control.signer = signing.Signer.generate()  # back, signing with a key the pod does not trust
        await control.start()
        samples = await until(
            http,
            metrics,
            lambda s: bool(value(s, "dap_pod_verification_failures_total", kind="signature")),
            "a refused snapshot counted",
        )
        assert value(samples, "dap_pod_last_pull_success") == 1  # it reached the control
        assert value(samples, "dap_pod_converged") == 1  # and still serves v1
        assert value(samples, "dap_pod_artifact_version") == v1["version"]
