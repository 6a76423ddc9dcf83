"""``rate_limit`` on service actions across two real server processes' worth of apps: keyed by
address for anonymous callers of a public action, by tenant, and by principal; 429 with
``Retry-After`` as a problem document. The keys themselves are a pure function, tested first."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dap.config.actions import RateLimitSpec
from dap.server.access import throttling

from .conftest import Running, load, running, token
from .documents_spec import JSON
from .services_spec import SPEC, install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")
TENANT = uuid.UUID(int=7)


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("ops-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


async def test_the_key_follows_what_the_action_declares() -> None:
    def key(spec: RateLimitSpec, sub: str = "u-1", ip: str = "10.0.0.1") -> tuple[throttling.Limit, str]:
        return throttling.action_limit("ops/tools", "echo", spec, tenant=TENANT, sub=sub, ip=ip)

    limit, who = key(RateLimitSpec(requests=5, per="2m"))
    assert limit == throttling.Limit("action:ops/tools/echo", 5, 120.0) and who == f"{TENANT}:u-1"
    assert key(RateLimitSpec(requests=5, burst=9))[0].hits == 9  # burst, when larger, is the window's most
    assert key(RateLimitSpec(requests=5, burst=2))[0].hits == 5
    assert key(RateLimitSpec(requests=5, key="tenant"))[1] == str(TENANT)
    assert key(RateLimitSpec(requests=5, key="ip"))[1] == f"{TENANT}:ip:10.0.0.1"
    assert key(RateLimitSpec(requests=5), sub="")[1] == f"{TENANT}:ip:10.0.0.1"  # anonymous: by address


async def post(srv: Running, path: str, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    async with srv.http.post(f"{srv.api}/default/api/{path}", json={}, headers={**JSON, **headers}) as resp:
        return resp.status, await resp.json(), {k.lower(): v for k, v in resp.headers.items()}


async def test_limits_are_shared_by_two_servers_per_declared_key(pg_dsn: str, registered: None) -> None:
    catalog = load(SPEC)
    async with running(pg_dsn, catalog) as one, running(pg_dsn, catalog) as two:
        # hello: public, 2 per minute per address; anonymous callers from one address share it
        got = [(await post(s, "ops/tools/hello", {}))[0] for s in (one, two)]
        status, answer, headers = await post(one, "ops/tools/hello", {})
        assert got == [200, 200] and status == 429, (got, answer)
        assert answer["code"] == "SVC.RATE.LIMITED" and answer["status"] == 429
        assert 1 <= int(headers["retry-after"]) <= 60
        assert headers["content-type"].startswith("application/problem+json")
        # quota: 3 per minute per tenant, whoever calls
        callers = [{"Authorization": f"Bearer {token(sub=f'q-{i}')}"} for i in range(4)]
        got = [
            (await post(s, "ops/tools/quota", h))[0]
            for s, h in zip((one, two, one, two), callers, strict=True)
        ]
        assert got == [200, 200, 200, 429], got
