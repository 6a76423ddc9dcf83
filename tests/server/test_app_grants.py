"""Grant requests between apps over real HTTP, gRPC, the websocket and Postgres (issue 47).

The spec of ``protocols_spec`` plus two apps: ``sales/backoffice`` offers the ``sales/tools``
service, ``sales/portal`` consumes it. The boot asks the owner (a pending request); calls made
through the portal are refused until granted and after a revoke, on every protocol, while the
same caller through the owner (or through no app) is served; after a grant exactly the granted
actions are served; naming another app (a header, an unknown app) gains nothing. The tests run
in order on one server and share its grant request.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest
import pytest_asyncio

from dap import config
from dap.server.catalog import Catalog
from dap.server.rpc import server as rpc_server
from dap.server.web import app
from dap.server.workflows import granting

from ..conftest import drop_database
from .conftest import Running, fresh_database_async, load, running, serve_options
from .protocols_clients import Grpc, Rest, Ws, camel
from .protocols_spec import SPEC, Outcome, bearer
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

APPS = """
apiVersion: dap.io/v1
kind: Service
metadata: {name: desk, module: sales}
spec:
  expose: [{type: rest}]
  actions:
    - {name: unrun, impl: {type: native, handler: nobody-registered-this}}
---
apiVersion: dap.io/v1
kind: App
metadata: {name: backoffice, module: sales}
spec:
  title: Back office
  interfaces:
    - {service: tools, actions: [quote, hello, wire_only]}
    - {service: desk}
---
apiVersion: dap.io/v1
kind: App
metadata: {name: portal, module: sales}
spec:
  title: Portal
  consumes:
    - {app: backoffice, service: tools}
    - {app: backoffice, service: desk}
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: steward}
spec:
  permissions: [sales.backoffice.administer]
"""
MANAGER = bearer("meg", "manager")  # holds sales.tools.quote
NOBODY = bearer("nils")
STEWARD = bearer("stan", "steward")  # administers the back office
PARAMS = {"text": "hi"}
PROTOCOLS = ("rest", "grpc", "ws")


class Clients:
    def __init__(self, running: Running, rpc: Grpc, pool: asyncpg.Pool) -> None:
        self.srv, self.rpc, self.ws, self.pool = running, rpc, Ws(running), pool
        self.rest = Rest(running)

    async def call(
        self, protocol: str, action: str, who: str, through: str | None, **headers: str
    ) -> Outcome:
        """Service action ``sales/tools/{action}`` made through app ``through`` (None: no app)."""
        if protocol == "rest":
            prefix = f"_apps/{through}/" if through is not None else ""
            url = f"{self.srv.api}/default/api/{prefix}sales/tools/{action}"
            sent = {"Authorization": who, **headers}
            async with self.srv.http.post(url, json=PARAMS, headers=sent) as resp:
                body = await resp.json()
                return ("ok" if resp.status == 200 else body["code"]), body
        if protocol == "grpc":
            method = camel(action)
            request = self.rpc.request("tools", method)
            request.params.update(PARAMS)
            extra = {"dap-app": through} if through is not None else {}
            return await self.rpc._acted("tools", method, request, self.rpc.metadata(who, **extra, **headers))
        frame: dict[str, Any] = {"service": "sales/tools", "verb": action, "body": PARAMS}
        if through is not None:
            frame["app"] = through
        return await self.ws._call(who, **frame)

    async def grants(self, who: str = STEWARD, query: str = "") -> tuple[int, Any]:
        async with self.srv.http.get(
            f"{self.srv.api}/default/api/_grants{query}", headers={"Authorization": who}
        ) as resp:
            return resp.status, await resp.json()

    async def decide(self, grant_id: str, verb: str, body: Any, who: str = STEWARD) -> tuple[int, Any]:
        async with self.srv.http.post(
            f"{self.srv.api}/default/api/_grants/{grant_id}/{verb}", json=body, headers={"Authorization": who}
        ) as resp:
            return resp.status, await resp.json()


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("grant-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def c(pg_dsn: str, registered: None) -> AsyncIterator[Clients]:
    catalog = load({**SPEC, "sales/apps.yaml": APPS})
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0"), catalog)
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2)
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            assert rpc.pool is not None
            yield Clients(Running(server, http), Grpc(ch, rpc.pool), pool)
    finally:
        await pool.close()
        await server.stop()


async def _request(c: Clients) -> dict[str, Any]:
    status, answer = await c.grants()
    assert status == 200, answer
    [found] = [g for g in answer["data"] if g["service"] == "sales/tools"]
    return dict(found)


async def test_the_boot_asks_the_owner_and_its_administrators_see_it(c: Clients) -> None:
    found = await _request(c)
    assert found["consumer"] == "sales/portal" and found["owner"] == "sales/backoffice"
    assert found["service"] == "sales/tools" and found["status"] == "pending"
    assert found["actions"] == ["quote", "hello", "wire_only"] and found["granted"] == []
    assert found["requested_by"] == "boot of the served spec"
    # who does not administer the owner sees nothing of it, nor decides it
    status, answer = await c.grants(MANAGER)
    assert status == 200 and answer["data"] == []
    status, answer = await c.decide(found["id"], "grant", {}, who=MANAGER)
    assert status == 404 and answer["code"] == granting.GRANT_NOT_FOUND
    status, answer = await c.grants(query="?status=granted")
    assert answer["data"] == []
    status, answer = await c.grants(query="?status=pending&owner=sales/backoffice")
    assert sorted(g["service"] for g in answer["data"]) == ["sales/desk", "sales/tools"]


async def test_the_grant_is_checked_before_whether_the_action_can_run(c: Clients) -> None:
    # an action this server cannot run (501) is still 403 through an app that lacks the grant
    url = f"{c.srv.api}/default/api/_apps/sales/portal/sales/desk/unrun"
    async with c.srv.http.post(url, json={}, headers={"Authorization": MANAGER}) as resp:
        assert resp.status == 403 and (await resp.json())["code"] == granting.GRANT_MISSING
    url = f"{c.srv.api}/default/api/_apps/sales/backoffice/sales/desk/unrun"
    async with c.srv.http.post(url, json={}, headers={"Authorization": MANAGER}) as resp:
        assert resp.status == 501


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_before_the_grant_the_consumer_is_refused_and_the_owner_served(
    c: Clients, protocol: str
) -> None:
    code, _ = await c.call(protocol, "quote", MANAGER, "sales/portal")
    assert code == granting.GRANT_MISSING
    assert (await c.call(protocol, "quote", MANAGER, "sales/backoffice"))[0] == "ok"
    assert (await c.call(protocol, "quote", MANAGER, None))[0] == "ok"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_forged_attribution_gains_nothing(c: Clients, protocol: str) -> None:
    # naming the owner beside the consumer's address is ignored (REST reads the path only)
    extra = {"x-dap-app": "sales/backoffice"} if protocol != "ws" else {}
    assert (await c.call(protocol, "quote", MANAGER, "sales/portal", **extra))[0] == granting.GRANT_MISSING
    # an app the workspace does not declare is no way around it
    assert (await c.call(protocol, "quote", MANAGER, "sales/ghost"))[0] == granting.APP_NOT_FOUND
    # through the owner, a caller still needs their own permission: attribution never widens
    assert (await c.call(protocol, "quote", NOBODY, "sales/backoffice"))[0] == "SVC.AUTH.FORBIDDEN"


async def test_a_refusal_or_revoke_needs_a_reason_and_a_grant_only_what_is_asked(c: Clients) -> None:
    found = await _request(c)
    status, answer = await c.decide(found["id"], "refuse", {})
    assert status == 422 and answer["code"] == granting.REASON_REQUIRED
    status, answer = await c.decide(found["id"], "revoke", {"reason": "nothing to revoke"})
    assert status == 409 and answer["code"] == granting.GRANT_CONFLICT
    status, answer = await c.decide(found["id"], "grant", {"actions": ["quote", "batch"]})
    assert status == 422 and answer["code"] == "SVC.APP.GRANT_NOT_ASKED"
    assert (await _request(c))["status"] == "pending"


async def test_after_the_grant_exactly_the_granted_actions_are_served(c: Clients) -> None:
    found = await _request(c)
    status, answer = await c.decide(found["id"], "grant", {"actions": ["quote"], "reason": "pilot"})
    assert status == 200, answer
    assert answer["data"]["status"] == "granted" and answer["data"]["granted"] == ["quote"]
    assert answer["data"]["decided_by"] == "stan"
    for protocol in PROTOCOLS:
        assert (await c.call(protocol, "quote", MANAGER, "sales/portal"))[0] == "ok", protocol
    for protocol, action in (
        ("rest", "hello"),
        ("grpc", "hello"),
        ("grpc", "wire_only"),
        ("ws", "wire_only"),
    ):
        code, _ = await c.call(protocol, action, MANAGER, "sales/portal")
        assert code == granting.GRANT_MISSING, (protocol, action)
    # an action the owner does not offer is never the consumer's, whatever was granted
    code, _ = await c.call("grpc", "limited", MANAGER, "sales/portal")
    assert code == granting.GRANT_MISSING
    # the grant is the app's, not the user's: a caller without the permission is still refused
    assert (await c.call("rest", "quote", NOBODY, "sales/portal"))[0] == "SVC.AUTH.FORBIDDEN"
    status, answer = await c.decide(found["id"], "refuse", {"reason": "late"})
    assert status == 409 and answer["code"] == granting.GRANT_CONFLICT


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_granted_calls_run_on_every_protocol(c: Clients, protocol: str) -> None:
    assert (await c.call(protocol, "quote", MANAGER, "sales/portal"))[0] == "ok"


async def test_after_a_revoke_the_consumer_is_refused_again(c: Clients) -> None:
    found = await _request(c)
    status, answer = await c.decide(found["id"], "revoke", {"reason": "pilot over"})
    assert status == 200 and answer["data"]["status"] == "revoked" and answer["data"]["granted"] == []
    for protocol in PROTOCOLS:
        assert (await c.call(protocol, "quote", MANAGER, "sales/portal"))[0] == granting.GRANT_MISSING
        assert (await c.call(protocol, "quote", MANAGER, "sales/backoffice"))[0] == "ok"


async def test_every_step_is_audited(c: Clients) -> None:
    found = await _request(c)
    rows = await c.pool.fetch(
        "SELECT action, actor_username FROM dap.audit_log WHERE entity = $1 AND record_id = $2 ORDER BY id",
        granting.AUDIT_ENTITY,
        uuid.UUID(found["id"]),
    )
    assert [r["action"] for r in rows] == ["requested", "granted", "revoked"]
    assert [r["actor_username"] for r in rows] == ["dap-deploy", "stan", "stan"]
    # the administrators read the same trail over REST, newest first
    async with c.srv.http.get(
        f"{c.srv.api}/default/api/_grants/{found['id']}/_audit", headers={"Authorization": STEWARD}
    ) as resp:
        trail = (await resp.json())["data"]
    assert [t["action"] for t in trail] == ["revoked", "granted", "requested"]
    assert trail[0]["changes"]["reason"] == ["pilot", "pilot over"]
    async with c.srv.http.get(
        f"{c.srv.api}/default/api/_grants/{found['id']}/_audit", headers={"Authorization": MANAGER}
    ) as resp:
        assert resp.status == 404


async def test_a_new_deployment_asks_again_only_when_the_ask_changed(c: Clients) -> None:
    catalog = c.srv.server.app[app.state.SPEC].current
    tenant = (await c.pool.fetchrow("SELECT id FROM dap.workspaces WHERE slug = 'default'"))["id"]
    async with c.srv.server.app[app.state.POOL].acquire() as conn:  # the server's codecs (jsonb)
        assert len(granting.asks(catalog)) == 2
        assert await granting.request_all(conn, tenant, granting.asks(catalog), "again") == 0
        found = await _request(c)
        await c.decide(found["id"], "grant", {"actions": ["quote"], "reason": "back on"})
        narrower = [
            granting.offers.Ask("sales/portal", "sales/backoffice", "sales/tools", ("quote", "hello"))
        ]
        assert await granting.request_all(conn, tenant, narrower, "deployment v2") == 1
    found = await _request(c)
    # a wider ask waits for the owner again; what was granted still holds meanwhile
    assert found["status"] == "pending" and found["granted"] == ["quote"]
    assert found["requested_by"] == "deployment v2"
    assert (await c.call("rest", "quote", MANAGER, "sales/portal"))[0] == "ok"
    assert (await c.call("rest", "hello", MANAGER, "sales/portal"))[0] == granting.GRANT_MISSING


async def test_the_openapi_document_lists_the_grant_routes_and_the_consumer_s_paths(c: Clients) -> None:
    async with c.srv.http.get(f"{c.srv.api}/default/api/openapi.json") as resp:
        paths = (await resp.json())["paths"]
    for verb in ("grant", "refuse", "revoke"):
        assert "post" in paths[f"/api/_grants/{{id}}/{verb}"]
    assert "get" in paths["/api/_grants"] and "get" in paths["/api/_grants/{id}"]
    through = paths["/api/_apps/sales/portal/sales/tools/quote"]["post"]
    assert through["operationId"].endswith("_through_sales_portal")
    assert granting.GRANT_MISSING in through["responses"]["403"]["description"]
    assert "/api/_apps/sales/backoffice/sales/tools/quote" not in paths  # the owner calls directly


async def test_the_ui_metadata_says_how_far_the_consumer_is_granted(c: Clients) -> None:
    async with c.srv.http.get(f"{c.srv.api}/default/_ui/_meta/apps/sales/portal") as resp:
        portal = (await resp.json())["data"]
    assert portal["through"] == "api/_apps/sales/portal"
    grant = next(g for g in portal["grants"] if g["service"] == "sales/tools")
    assert grant["service"] == "sales/tools" and grant["owner"] == "sales/backoffice"
    assert grant["owner_title"] == "Back office"
    assert grant["asked"] == ["quote", "hello", "wire_only"]
    assert grant["status"] == "pending" and grant["granted"] == ["quote"]  # the previous test's state
    async with c.srv.http.get(f"{c.srv.api}/default/_ui/_meta/apps/sales/backoffice") as resp:
        assert (await resp.json())["data"]["grants"] == []


async def test_the_procurement_example_asks_purchasing_for_the_supplier_portal(pg_server_dsn: str) -> None:
    """``make dev``'s spec: booted, the supplier portal's request waits for a buying manager, and the
    portal's call is refused until then (``examples/procurement``)."""
    catalog = Catalog.from_spec(config.load_spec(Path(__file__).parents[2] / "examples/procurement"))
    name, dsn = await fresh_database_async(pg_server_dsn)
    async with running(dsn, catalog) as r:
        manager = bearer("max", "buying_manager")
        async with r.http.get(f"{r.api}/default/api/_grants", headers={"Authorization": manager}) as resp:
            [request] = (await resp.json())["data"]
        assert (request["consumer"], request["owner"]) == ("supplier/portal", "buying/purchasing")
        assert request["service"] == "buying/supplier_desk" and request["actions"] == ["open_orders"]
        assert request["status"] == "pending"
        async with r.http.get(
            f"{r.api}/default/api/_grants", headers={"Authorization": bearer("anna", "buyer")}
        ) as resp:
            assert (await resp.json())["data"] == []
        url = f"{r.api}/default/api/_apps/supplier/portal/buying/supplier_desk/open_orders"
        async with r.http.post(url, json={"supplier": "acme"}, headers={"Authorization": manager}) as resp:
            assert resp.status == 403 and (await resp.json())["code"] == granting.GRANT_MISSING
    await drop_database(pg_server_dsn, name)


async def test_a_workspace_registered_later_asks_too(c: Clients) -> None:
    await c.srv.register("later")
    async with c.srv.http.get(
        f"{c.srv.api}/later/api/_grants", headers={"Authorization": bearer("stan", "steward")}
    ) as resp:
        data = (await resp.json())["data"]
    assert sorted(g["service"] for g in data) == ["sales/desk", "sales/tools"]
    assert {g["status"] for g in data} == {"pending"}
    assert {g["requested_by"] for g in data} == {"registration of workspace later"}
    # each workspace decides alone: the default workspace's grant does not open this one
    assert (await c.call("rest", "quote", MANAGER, "sales/portal"))[0] == "ok"
    url = f"{c.srv.api}/later/api/_apps/sales/portal/sales/tools/quote"
    async with c.srv.http.post(url, json=PARAMS, headers={"Authorization": MANAGER}) as resp:
        assert resp.status == 403 and (await resp.json())["code"] == granting.GRANT_MISSING
