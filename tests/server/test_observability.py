"""The admin listener's observability surface: the logs query (``/logs``), the metrics switch and
the debug surface, on a real server and Postgres."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from dap import logs

from .conftest import ADMIN, running

BEARER = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def captured() -> Iterator[None]:
    """The JSON-lines handler ``dap serve`` installs, writing to a buffer instead of stderr."""
    handler = logs.JsonLines(io.StringIO(), logs.WINDOW)
    root = logging.getLogger()
    # the only handler feeding the window meanwhile: one an earlier test of this process installed
    # (``logs.setup``) would add every line a second time
    others = [h for h in root.handlers if isinstance(h, logs.JsonLines)]
    for other in others:
        root.removeHandler(other)
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        for other in others:
            root.addHandler(other)
        root.setLevel(level)


async def test_logs_query_filters_the_window_and_names_a_bad_filter_position(
    pg_dsn: str, captured: None
) -> None:
    async with running(pg_dsn) as srv:
        url = f"{srv.admin}/logs"
        async with srv.http.get(url) as resp:
            assert resp.status == 401  # tenant names and errors: admin secret only
        # lines of the server itself: a registration logs its workspace
        await srv.register("logs-acme")
        probe = logging.getLogger("dap.test.observability")
        probe.warning("delivery late", extra={"ctx": {"workspace": "logs-acme", "request_id": "req-77"}})
        probe.info("quiet line", extra={"ctx": {"workspace": "logs-acme"}})
        async with srv.http.get(url, params={"filter": "workspace=logs-acme"}, headers=BEARER) as resp:
            assert resp.status == 200
            body = await resp.json()
        msgs = [line["msg"] for line in body["data"]]
        assert msgs == ["workspace registered", "delivery late", "quiet line"]
        assert body["more"] is False and body["window"] == logs.WINDOW.size
        params = {"filter": "level>=warn and request=req-77", "since": "5m"}
        async with srv.http.get(url, params=params, headers=BEARER) as resp:
            (line,) = (await resp.json())["data"]
        assert line["msg"] == "delivery late" and line["logger"] == "dap.test.observability"
        async with srv.http.get(
            url, params={"filter": "workspace=logs-acme", "limit": "1"}, headers=BEARER
        ) as resp:
            body = await resp.json()
        assert [x["msg"] for x in body["data"]] == ["quiet line"] and body["more"] is True

        async with srv.http.get(url, params={"filter": "level>=loud"}, headers=BEARER) as resp:
            assert resp.status == 400
            assert resp.content_type == "application/problem+json"
            problem = await resp.json()
        assert problem["code"] == "LOGS_FILTER_INVALID" and problem["position"] == 7
        assert problem["errors"][0]["path"] == "filter" and "unknown level" in problem["detail"]
        async with srv.http.get(url, params={"since": "lately"}, headers=BEARER) as resp:
            assert resp.status == 400
            assert (await resp.json())["parameter"] == "since"
        async with srv.http.get(url, params={"limit": "0"}, headers=BEARER) as resp:
            assert resp.status == 400


async def test_metrics_switch_and_the_operators_metrics(pg_dsn: str) -> None:
    async with running(pg_dsn, metrics=False) as srv:
        async with srv.http.get(f"{srv.admin}/metrics") as resp:
            assert resp.status == 404
            assert resp.content_type == "application/problem+json"
            problem = await resp.json()
        assert problem["code"] == "OBSERVABILITY_METRICS_DISABLED" and "--metrics" in problem["detail"]
        async with srv.http.get(f"{srv.admin}/health") as resp:
            assert resp.status == 200  # only the metrics are off
    async with running(pg_dsn) as srv:
        async with srv.http.get(f"{srv.api}/default/api/shop/product", headers=srv.auth()) as resp:
            assert resp.status == 200
        async with srv.http.get(f"{srv.admin}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
    samples = {line.split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name in (
        "dap_db_pool_waiting",
        "dap_db_pool_waits_total",
        "dap_db_pool_wait_seconds_total",
        "dap_events_pending",
        "dap_events_oldest_pending_seconds",
        "dap_jobs_queued",
        "dap_jobs_running",
    ):
        assert name in samples, name
    assert any(s.startswith("dap_http_requests_total{") and 'workspace="default"' in s for s in samples)
    assert "# TYPE dap_events_delivery_lag_seconds histogram" in text


DEBUG = ("/debug/tasks", "/debug/pool", "/debug/artifact", "/debug/workspaces", "/debug/profile?seconds=0.3")


async def test_debug_surface_is_off_unless_enabled_and_then_admin_only(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:  # not enabled: refused even with the admin secret
        for path in DEBUG:
            async with srv.http.get(f"{srv.admin}{path}", headers=BEARER) as resp:
                assert resp.status == 403, path
                problem = await resp.json()
            assert (
                problem["code"] == "OBSERVABILITY_DEBUG_FORBIDDEN" and "--debug-surface" in problem["detail"]
            )
    async with running(pg_dsn, debug_surface=True) as srv:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {ADMIN}"}):
            async with srv.http.get(f"{srv.admin}/debug/tasks", headers=headers) as resp:
                assert resp.status == 403
                assert (await resp.json())["code"] == "OBSERVABILITY_DEBUG_FORBIDDEN"
    async with running(pg_dsn, debug_surface=True, admin_secret=None) as srv:  # no secret: nobody
        async with srv.http.get(f"{srv.admin}/debug/tasks", headers=BEARER) as resp:
            assert resp.status == 403
        async with srv.http.get(f"{srv.admin}/debug/pool") as resp:
            assert resp.status == 403


async def test_debug_surface_shows_the_process_and_no_secret_or_tenant_data(pg_dsn: str) -> None:
    from .conftest import SECRET

    marker = "Tenant-Secret-Title-7f3a"
    async with running(pg_dsn, debug_surface=True) as srv:
        body = {"sku": "DBG-1", "title": marker, "price": "9.99"}
        async with srv.http.post(
            f"{srv.api}/default/api/shop/product", json=body, headers=srv.auth()
        ) as resp:
            assert resp.status == 201
        answers = {}
        for path in DEBUG:
            async with srv.http.get(f"{srv.admin}{path}", headers=BEARER) as resp:
                assert resp.status == 200, path
                answers[path] = await resp.text()
    tasks = answers["/debug/tasks"]
    assert "dap-events-dispatcher" in tasks and "job-worker-0" in tasks
    assert '"size"' in answers["/debug/pool"] and '"waits"' in answers["/debug/pool"]
    assert "product" in answers["/debug/artifact"]
    assert '"workspace": "default"' in answers["/debug/workspaces"]
    assert "function calls" in answers["/debug/profile?seconds=0.3"]
    dsn_password = pg_dsn.split("//", 1)[1].split("@", 1)[0].partition(":")[2]
    for path, text in answers.items():
        for secret in (ADMIN, SECRET, marker, "DBG-1", pg_dsn) + ((dsn_password,) if dsn_password else ()):
            assert secret not in text, (path, secret)


def test_profile_settings_bound_the_seconds_and_default_the_rest() -> None:
    from dap.server import errors
    from dap.server.web import admin_debug

    assert admin_debug.profile_settings({}) == (5.0, "cumulative", 60)
    assert admin_debug.profile_settings({"seconds": "2", "sort": "tottime", "top": "10"}) == (
        2.0,
        "tottime",
        10,
    )
    assert admin_debug.profile_settings({"sort": "__class__", "top": "-1"}) == (5.0, "cumulative", 60)
    for bad in ("0", "61", "soon", "-3"):
        with pytest.raises(errors.BadRequest):
            admin_debug.profile_settings({"seconds": bad})
