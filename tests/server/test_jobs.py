"""Tracked async jobs over real HTTP and Postgres: 202 and ``GET …/_jobs/{id}``, progress that only
goes up, record and service jobs, failures, idempotent enqueueing, callbacks to a real loopback
receiver (signed, verified with the ``standardwebhooks`` package, retried with backoff), the
callback address checks, and a job resumed by the next server after a stop mid-run."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
import standardwebhooks
from aiohttp import web

from dap.server.web import jobs as web_jobs

from ..conftest import drop_database, new_database
from .conftest import Running, load, running, token
from .documents_spec import JSON
from .services_spec import EFFECTS, SPEC, install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")
SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("ops-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@dataclass
class Receiver:
    """A loopback HTTP server that records every callback and fails the first ``failures`` of a path."""

    url: str = ""
    got: list[tuple[str, bytes, dict[str, str], float]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.got.append((request.path, body, dict(request.headers), time.monotonic()))
        left = self.failures.get(request.path, 0)
        if left:
            self.failures[request.path] = left - 1
            return web.Response(status=500)
        return web.Response(status=204)

    def at(self, path: str) -> list[tuple[str, bytes, dict[str, str], float]]:
        return [g for g in self.got if g[0] == path]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}"
    yield found
    await runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None, receiver: Receiver) -> AsyncIterator[Running]:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute(EFFECTS)
    await conn.close()
    async with running(
        pg_dsn,
        load(SPEC),
        pool_size=8,
        callback_allow=["127.0.0.0/8"],
        callback_secret=SECRET,
        job_lease="2s",
    ) as r:
        yield r


async def post(srv: Running, path: str, body: Any = None, **headers: str) -> tuple[int, Any, dict[str, str]]:
    hdrs = {**srv.auth(), **JSON, **headers}
    async with srv.http.post(f"{srv.api}/default/api/{path}", json=body, headers=hdrs) as resp:
        return resp.status, await resp.json(), {k.lower(): v for k, v in resp.headers.items()}


async def get_job(srv: Running, location: str, **headers: str) -> tuple[int, Any]:
    hdrs = headers or srv.auth()
    async with srv.http.get(f"{srv.api}{location}", headers=hdrs) as resp:
        return resp.status, await resp.json()


async def until(srv: Running, location: str, done: Any, seconds: float = 20.0) -> dict[str, Any]:
    """Poll the job until ``done(job)``; the job."""
    deadline = time.monotonic() + seconds
    while True:
        status, answer = await get_job(srv, location)
        assert status == 200, answer
        job: dict[str, Any] = answer["data"]
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job never got there: {job}"
        await asyncio.sleep(0.05)


def finished(job: dict[str, Any]) -> bool:
    return job["state"] in ("succeeded", "failed")


async def effects(dsn: str, tag: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        found: int = await conn.fetchval("SELECT count(*) FROM public.job_effects WHERE tag = $1", tag)
        return found
    finally:
        await conn.close()


async def test_an_async_service_action_answers_202_with_a_job_that_finishes(
    srv: Running, pg_dsn: str
) -> None:
    tag = uuid.uuid4().hex
    status, answer, headers = await post(srv, "ops/tools/crunch", {"tag": tag})
    assert status == 202, answer
    job = answer["data"]
    assert uuid.UUID(job["id"]) and job["state"] == "queued" and job["progress"] == 0
    assert headers["location"] == f"/default/api/ops/tools/_jobs/{job['id']}"
    done = await until(srv, headers["location"], finished)
    assert done["state"] == "succeeded" and done["progress"] == 100
    assert done["result"]["result"]["tag"] == tag
    assert done["started_at"] and done["finished_at"] and done["runs"] == 1
    assert await effects(pg_dsn, tag) == 1


async def test_progress_shows_while_running_and_only_goes_up(srv: Running, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    tag = uuid.uuid4().hex
    status, _answer, headers = await post(
        srv, "ops/tools/crunch", {"tag": tag, "hold": str(hold), "seconds": 0.5}
    )
    assert status == 202
    seen: list[float] = []

    def watch(job: dict[str, Any]) -> bool:
        seen.append(job["progress"])
        return bool(job["state"] == "running" and job["progress"] >= 10)

    running_job = await until(srv, headers["location"], watch)
    assert running_job["progress"] == 10 and "result" not in running_job
    hold.unlink()

    def last(job: dict[str, Any]) -> bool:
        watch(job)
        return finished(job)

    await until(srv, headers["location"], last)
    assert 60 in seen  # reported while the handler slept
    assert seen == sorted(seen) and seen[-1] == 100  # the handler's 30 after 60 never showed


async def test_a_record_action_runs_as_a_job(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/task", {"title": "write the report"})
    assert status == 201
    task = answer["data"]
    assert task["state"] == "open"
    status, answer, headers = await post(srv, f"ops/task/{task['id']}/finish", {"tag": uuid.uuid4().hex})
    assert status == 202, answer
    assert headers["location"].startswith("/default/api/ops/task/_jobs/")
    done = await until(srv, headers["location"], finished)
    assert done["state"] == "succeeded", done
    assert done["record_id"] == task["id"]
    assert done["result"]["data"]["state"] == "done" and done["result"]["transition"] == {
        "from": "open",
        "to": "done",
    }
    assert uuid.UUID(done["result"]["event"])
    # a second run of the transition fails in the job with the action's own 409
    status, answer, headers = await post(srv, f"ops/task/{task['id']}/finish", {"tag": "again"})
    failed = await until(srv, headers["location"], finished)
    assert failed["state"] == "failed" and failed["error"]["status"] == 409
    assert failed["error"]["code"] == "SVC.STATE.TRANSITION_NOT_ALLOWED"


async def test_request_time_checks_still_refuse_before_a_job_exists(srv: Running) -> None:
    status, answer, _ = await post(srv, f"ops/task/{uuid.uuid4()}/finish", {"tag": "x"})
    assert status == 404
    status, answer, _ = await post(srv, "ops/tools/crunch", {})
    assert status == 422 and answer["code"] == "SVC.ACTION.PARAMS_INVALID"


async def test_a_failing_handler_fails_the_job_with_a_problem(srv: Running) -> None:
    status, _answer, headers = await post(srv, "ops/tools/boom", {})
    assert status == 202
    job = await until(srv, headers["location"], finished)
    assert job["state"] == "failed" and job["error"]["status"] == 500
    assert job["id"] in job["error"]["detail"]  # quotes the job id, not the exception text
    assert "broke" not in job["error"]["detail"]


async def test_a_job_is_shown_to_its_caller_only(srv: Running) -> None:
    _status, _answer, headers = await post(srv, "ops/tools/crunch", {"tag": uuid.uuid4().hex})
    location = headers["location"]
    other = {"Authorization": f"Bearer {token(sub='u-2', username='bob')}"}
    assert (await get_job(srv, location, **other))[0] == 404
    assert (await get_job(srv, location, Accept="application/json"))[0] == 404  # anonymous
    assert (await get_job(srv, location.replace("ops/tools", "ops/task")))[0] == 404
    assert (await get_job(srv, f"/default/api/ops/tools/_jobs/{uuid.uuid4()}"))[0] == 404
    assert (await get_job(srv, "/default/api/ops/tools/_jobs/not-a-uuid"))[0] == 404
    await until(srv, location, finished)


async def test_the_same_idempotency_key_gets_the_same_job(srv: Running, pg_dsn: str) -> None:
    tag, key = uuid.uuid4().hex, uuid.uuid4().hex
    first = await post(srv, "ops/tools/crunch", {"tag": tag}, **{"Idempotency-Key": key})
    again = await post(srv, "ops/tools/crunch", {"tag": tag}, **{"Idempotency-Key": key})
    assert first[0] == again[0] == 202
    assert first[1]["data"]["id"] == again[1]["data"]["id"]
    assert again[2].get("idempotent-replayed") == "true"
    await until(srv, first[2]["location"], finished)
    assert await effects(pg_dsn, tag) == 1


async def test_a_signed_callback_is_retried_and_verifies(srv: Running, receiver: Receiver) -> None:
    path = f"/hook/{uuid.uuid4().hex}"
    receiver.failures[path] = 1  # the first delivery gets a 500
    tag = uuid.uuid4().hex
    status, answer, headers = await post(
        srv, "ops/tools/crunch", {"tag": tag}, **{"X-Reply-To": receiver.url + path}
    )
    assert status == 202, answer
    job = await until(srv, headers["location"], lambda j: j.get("callback", {}).get("state") == "delivered")
    assert job["callback"]["attempts"] == 2 and job["callback"]["error"] is None
    calls = receiver.at(path)
    assert len(calls) == 2
    hook = standardwebhooks.Webhook(SECRET)
    for _, body, hdrs, _ in calls:
        payload = hook.verify(body, hdrs)  # raises unless signed with the server's secret
        assert payload["type"] == "job.succeeded"
        assert payload["data"]["id"] == job["id"] and payload["data"]["result"]["result"]["tag"] == tag
        assert hdrs["webhook-id"] == job["id"]  # the same message id on every retry
    assert calls[1][3] - calls[0][3] >= 0.04  # the backoff (50 ms) was waited
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook("whsec_" + base64.b64encode(os.urandom(32)).decode()).verify(
            calls[0][1], calls[0][2]
        )
    tampered = calls[0][1].replace(tag.encode(), b"x" * len(tag))
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        hook.verify(tampered, calls[0][2])


async def test_a_callback_that_never_succeeds_fails_after_max_attempts(
    srv: Running, receiver: Receiver
) -> None:
    path = f"/down/{uuid.uuid4().hex}"
    receiver.failures[path] = 100
    status, _, headers = await post(srv, "ops/tools/boom", {}, **{"X-Callback-Url": receiver.url + path})
    assert status == 202
    job = await until(srv, headers["location"], lambda j: j.get("callback", {}).get("state") == "failed")
    assert job["state"] == "failed" and job["callback"]["attempts"] == 2  # boom: max_attempts 2
    assert "500" in job["callback"]["error"]
    calls = receiver.at(path)
    assert len(calls) == 2
    assert "webhook-signature" not in {k.lower() for k in calls[0][2]}  # boom does not sign
    assert b'"type":"job.failed"' in calls[0][1]


async def test_internal_callback_urls_are_refused_at_request_time(srv: Running) -> None:
    for url in (
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/x",
        "http://192.168.0.10/",
        "ftp://example.com/x",
        "not a url",
    ):
        status, answer, _ = await post(srv, "ops/tools/crunch", {"tag": "x"}, **{"X-Reply-To": url})
        assert status == 422 and answer["code"] == "SVC.JOB.CALLBACK_REFUSED", (url, answer)


async def test_loopback_is_refused_without_the_allow_list(
    pg_dsn: str, registered: None, receiver: Receiver
) -> None:
    async with running(pg_dsn, load(SPEC), callback_secret=SECRET) as other:
        status, answer, _ = await post(
            other, "ops/tools/crunch", {"tag": "x"}, **{"X-Reply-To": receiver.url + "/x"}
        )
        assert status == 422 and "loopback" in answer["detail"] and "--callback-allow" in answer["detail"]


async def test_a_signed_callback_needs_a_secret(pg_dsn: str, registered: None, receiver: Receiver) -> None:
    async with running(pg_dsn, load(SPEC), callback_allow=["127.0.0.0/8"]) as other:
        url = receiver.url + "/unsigned"
        status, answer, _ = await post(other, "ops/tools/crunch", {"tag": "x"}, **{"X-Reply-To": url})
        assert status == 501 and answer["code"] == "SVC.JOB.CALLBACK_NOT_SIGNED"
        assert "--callback-secret" in answer["detail"]
        status, _, _ = await post(other, "ops/tools/crunch", {"tag": uuid.uuid4().hex})  # no callback: fine
        assert status == 202


@pytest_asyncio.fixture(loop_scope="module")
async def alone_dsn(pg_server_dsn: str) -> AsyncIterator[str]:
    """A database of its own: the module's ``srv`` polls the queue of ``pg_dsn`` and could claim a job
    before the server under test does (then it ran once, not twice)."""
    name, dsn = await new_database(pg_server_dsn)
    yield dsn
    await drop_database(pg_server_dsn, name)


async def test_a_job_interrupted_by_a_stop_is_resumed_by_the_next_server(
    alone_dsn: str, registered: None, tmp_path: Path
) -> None:
    pg_dsn = alone_dsn
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute(EFFECTS)
    await conn.close()
    hold = tmp_path / "hold"
    hold.touch()
    tag = uuid.uuid4().hex
    async with running(pg_dsn, load(SPEC), job_lease="1s") as first:
        status, _answer, headers = await post(first, "ops/tools/crunch", {"tag": tag, "hold": str(hold)})
        assert status == 202
        location = headers["location"]
        await until(first, location, lambda j: j["state"] == "running" and j["progress"] == 10)
        stopped = first.server.app[web_jobs.WORKER].name
    # the first server stopped mid-run: nothing of the run was committed, the job is queued again
    assert await effects(pg_dsn, tag) == 0
    # (queued, or already claimed by the module's other server: never still the stopped one's)
    conn = await asyncpg.connect(pg_dsn)
    try:
        job_id = uuid.UUID(location.rsplit("/", 1)[-1])
        held = await conn.fetchrow("SELECT state, worker, lost FROM dap.jobs WHERE id = $1", job_id)
    finally:
        await conn.close()
    assert held is not None and held["state"] == "queued" and held["worker"] is None, dict(held or {})
    assert held["lost"] == 0 and stopped
    hold.unlink()
    async with running(pg_dsn, load(SPEC), job_lease="1s") as second:
        job = await until(second, location, finished)
    assert job["state"] == "succeeded" and job["runs"] == 2 and job["progress"] == 100
    assert await effects(pg_dsn, tag) == 1
    conn = await asyncpg.connect(pg_dsn)
    try:  # handed back at the stop: not a lost lease
        assert await conn.fetchval("SELECT lost FROM dap.jobs WHERE id = $1", uuid.UUID(job["id"])) == 0
    finally:
        await conn.close()


async def test_two_servers_share_the_queue_and_run_each_job_once(
    pg_dsn: str, registered: None, srv: Running
) -> None:
    tags = [uuid.uuid4().hex for _ in range(20)]
    async with running(pg_dsn, load(SPEC), job_lease="2s") as other:
        locations = []
        for i, tag in enumerate(tags):
            status, _, headers = await post(other if i % 2 else srv, "ops/tools/crunch", {"tag": tag})
            assert status == 202
            locations.append(headers["location"])
        done = [await until(srv, location, finished) for location in locations]
    assert all(j["state"] == "succeeded" and j["runs"] == 1 for j in done), done
    conn = await asyncpg.connect(pg_dsn)
    try:
        counts = await conn.fetch(
            "SELECT tag, count(*) AS n FROM public.job_effects WHERE tag = ANY($1) GROUP BY tag", tags
        )
    finally:
        await conn.close()
    assert sorted(r["tag"] for r in counts) == sorted(tags) and {r["n"] for r in counts} == {1}


async def test_a_delivery_goes_only_to_the_addresses_it_checked(receiver: Receiver) -> None:
    from dap.server.workflows import callbacks

    path = f"/pinned/{uuid.uuid4().hex}"
    allow = callbacks.parse_networks(["127.0.0.0/8"])
    assert await callbacks.send(receiver.url + path, "{}", {}, allow) is None
    refused = await callbacks.send(receiver.url + path, "{}", {}, ())
    assert refused is not None and "loopback" in refused
    assert len(receiver.at(path)) == 1  # the refused one never left
