"""dap's metrics in a real Prometheus, and the shipped observability files in the real tools:
promtool checks kustomize/observability's alert rules and scrape configuration; Prometheus scrapes
a running server's admin listener, loads the same rules, and every query of the Grafana dashboard
(kustomize/observability/dap-dashboard.json) answers at least one series once the server has
served requests, delivered an event, retried a failed webhook and dead-lettered another. The
resource pod's panels and its alert read ``dap_pod_*`` series, which a ``dap serve`` has none of:
Prometheus scrapes those from a second target serving the pod's own collector
(``dap.resource_pod.pullmetrics.Collector``, the code a pod registers) in a pod's state that is
not converged and whose last pull failed, and the pod alert must be pending. Marked ``late`` (it
needs what tools/prometheus/build.sh builds)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dap.resource_pod import converging, pullmetrics
from tests import prometheus as prometheus_tool
from tests.dex import free_port

from .conftest import load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")
RULES = prometheus_tool.OBSERVABILITY / "dap-alerts.rules.yaml"
SCRAPE = prometheus_tool.OBSERVABILITY / "prometheus.yml"
DASHBOARD = prometheus_tool.OBSERVABILITY / "dap-dashboard.json"
SPEC = {
    "pm/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: pm}\nspec: {title: Metrics}\n",
    "pm/ticket.yaml": """apiVersion: dap.io/v1
kind: Entity
metadata: {name: ticket, module: pm}
spec:
  fields:
    - {name: title, type: string, required: true}
  events:
    - name: created
      deliver:
        - channel: webhook
          webhook: {url_from_config: pm_flaky}
          retry: {max_attempts: 5, backoff: 50ms, max_backoff: 100ms}
        - channel: webhook
          webhook: {url_from_config: pm_dead}
          retry: {max_attempts: 1, backoff: 10ms}
  expose:
    - type: rest
""",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = prometheus_tool.binaries() / "promtool"
    return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=120)


async def test_promtool_accepts_the_alert_rules_and_the_scrape_configuration() -> None:
    rules = promtool("check", "rules", str(RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # 8, the events slot's two (issue 46) and the resource pod's one
    assert "SUCCESS: 11 rules found" in rules.stdout + rules.stderr
    config = promtool("check", "config", "--syntax-only", str(SCRAPE))
    assert config.returncode == 0, config.stdout + config.stderr


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hooks() -> AsyncIterator[str]:
    failed: set[str] = set()

    async def flaky(request: web.Request) -> web.Response:
        key = request.headers["webhook-id"]
        if key not in failed:  # the first try of each event fails: one retry per event
            failed.add(key)
            return web.Response(status=503)
        return web.Response(status=204)

    async def dead(_request: web.Request) -> web.Response:
        return web.Response(status=500)

    async def pod_metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(POD), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_post("/flaky", flaky)
    app.router.add_post("/dead", dead)
    app.router.add_get("/metrics", pod_metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def pod_registry() -> CollectorRegistry:
    """A resource pod's pull and convergence series as a pod's ``/metrics`` shows them: it serves
    version 3 while its snapshot names 4, whose artifact failed twice; its last pull failed."""
    stats = pullmetrics.PullStats()
    for result in ("changed", "unchanged", "unreachable"):
        stats.pulled(result)
    stats.violation("signature")
    running = converging.Version(artifact_id="a-3", sha256="0" * 64, version=3, app="pm")
    failure = converging.Failure(artifact_id="a-4", sha256="1" * 64, count=2, retry_at=0.0, reason="bad")
    status = converging.Status(
        phase=converging.Phase.FAILED, running=running, snapshot_version=4, failure=failure
    )
    registry = CollectorRegistry()
    registry.register(pullmetrics.Collector("pm-pod", stats, lambda: status))
    return registry


POD = pod_registry()


async def api(http: aiohttp.ClientSession, base: str, path: str, **params: str) -> Any:
    async with http.get(f"{base}/api/v1/{path}", params=params) as resp:
        body = await resp.json()
        assert body["status"] == "success", body
        return body["data"]


def queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", "30s"))
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


async def test_prometheus_scrapes_dap_loads_the_rules_and_the_dashboard_queries_answer(
    pg_dsn: str, tmp_path: Path, hooks: str
) -> None:
    exe = prometheus_tool.binaries() / "prometheus"
    saved = {k: os.environ.get(k) for k in ("DAP_CONFIG_PM_FLAKY", "DAP_CONFIG_PM_DEAD")}
    os.environ.update({"DAP_CONFIG_PM_FLAKY": f"{hooks}/flaky", "DAP_CONFIG_PM_DEAD": f"{hooks}/dead"})
    try:
        async with running(pg_dsn, load(SPEC)) as srv:
            target = srv.admin.removeprefix("http://")
            pod = hooks.removeprefix("http://")
            port = free_port()
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                f"rule_files: [{json.dumps(str(RULES))}]\n"
                "scrape_configs:\n"
                f"  - job_name: dap\n    static_configs: [{{targets: [{json.dumps(target)}]}}]\n"
                f"  - job_name: dap-pod\n    static_configs: [{{targets: [{json.dumps(pod)}]}}]\n"
            )
            log = (tmp_path / "prometheus.log").open("w")
            proc = subprocess.Popen(  # noqa: ASYNC220 -- started once; the loop keeps serving scrapes
                [
                    str(exe),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            base = f"http://127.0.0.1:{port}"
            try:
                await traffic(srv)
                await check(srv.http, base, tmp_path)
            finally:
                proc.terminate()
                await asyncio.to_thread(proc.wait, 30)
                log.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def traffic(srv: Any) -> None:
    """Requests of every status class the dashboard shows, and events whose webhooks retry and die."""
    url = f"{srv.api}/default/api/pm/ticket"
    for i in range(3):
        async with srv.http.post(url, json={"title": f"t{i}"}, headers=srv.auth()) as resp:
            assert resp.status == 201
    async with srv.http.get(f"{url}/not-a-uuid", headers=srv.auth()) as resp:
        assert resp.status == 404


async def check(http: aiohttp.ClientSession, base: str, tmp_path: Path) -> None:
    deadline = asyncio.get_running_loop().time() + 90
    missing: list[str] = []
    while True:
        try:
            targets = await api(http, base, "targets")
            up = [t for t in targets["activeTargets"] if t["health"] == "up"]
            if up:
                missing = []
                for title, expr in queries():
                    found = await api(http, base, "query", query=expr)
                    if not found["result"]:
                        missing.append(f"{title}: {expr}")
                if not missing:
                    break
        except aiohttp.ClientError:
            missing = ["Prometheus is not answering yet"]
        if asyncio.get_running_loop().time() > deadline:
            log = (tmp_path / "prometheus.log").read_text()[-2000:]
            raise AssertionError(f"dashboard queries without series: {missing}\n{log}")
        await asyncio.sleep(1)
    (group,) = (await api(http, base, "rules"))["groups"]
    assert group["name"] == "dap" and len(group["rules"]) == 11
    assert all(r["health"] == "ok" for r in group["rules"]), group["rules"]
    assert {r["name"] for r in group["rules"]} >= {"DapEventLag", "DapDeadLetters", "DapPoolSaturated"}
    (pod,) = [r for r in group["rules"] if r["name"] == "DapPodNotConverged"]
    alerts = await until_alert(http, base, pod)
    assert {a["labels"]["workspace"] for a in alerts} == {"pm-pod"}


async def until_alert(http: aiohttp.ClientSession, base: str, rule: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod alert's pending instances (it fires after 10 minutes): the rule is evaluated every
    second, so within a few seconds of the first scrape."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        (group,) = (await api(http, base, "rules"))["groups"]
        (found,) = [r for r in group["rules"] if r["name"] == rule["name"]]
        if found["alerts"] or asyncio.get_running_loop().time() > deadline:
            assert found["alerts"], found
            assert all(a["state"] == "pending" for a in found["alerts"]), found["alerts"]
            return found["alerts"]  # type: ignore[no-any-return]
        await asyncio.sleep(1)
