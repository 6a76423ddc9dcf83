"""Service actions over real HTTP and Postgres: routing beside the REST paths, params, conditions,
permissions, ``public``, ``disabled``/``expose``, impl refusals, audit, ``emits`` and idempotency."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from dap import config
from dap.server.catalog import Catalog
from dap.server.web import services as routing

from .conftest import SHOP, Running, load, running, token
from .documents_spec import JSON
from .services_spec import SPEC, install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("ops-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Running]:
    async with running(pg_dsn, load({**SHOP, **SPEC}), pool_size=6) as r:
        yield r


async def post(
    srv: Running, path: str, body: Any = None, *, auth: bool = True, **headers: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    hdrs = {**(srv.auth() if auth else {}), **JSON, **headers}
    async with srv.http.post(f"{srv.api}/default/api/{path}", json=body, headers=hdrs) as resp:
        return resp.status, await resp.json(), {k.lower(): v for k, v in resp.headers.items()}


async def test_routing_is_decided_by_what_the_catalog_declares() -> None:
    catalog: Catalog = load({**SHOP, **SPEC})
    assert routing.target(catalog, "ops", "tools") == "service"
    assert routing.target(catalog, "shop", "product") == "entity"
    assert routing.target(catalog, "ops", "task") == "entity"
    assert routing.target(catalog, "ops", "nothing") == "entity"  # the REST 404/405 answers it
    assert routing.target(catalog, "shop", "tools") == "entity"  # the service is in module ops


async def test_a_service_without_a_rest_expose_entry_is_not_routed() -> None:
    files = {**SPEC, "ops/tools.yaml": SPEC["ops/tools.yaml"].replace("  expose: [{type: rest}]\n", "")}
    catalog = load(files)
    assert "ops/tools" not in catalog.services
    assert routing.target(catalog, "ops", "tools") == "entity"


async def test_public_is_refused_on_entity_actions() -> None:
    files = dict(SPEC)
    files["ops/task.yaml"] = files["ops/task.yaml"].replace(
        "    - name: finish\n", "    - name: finish\n      public: true\n"
    )
    with pytest.raises(config.SpecError, match="public: true is allowed on service actions only"):
        load(files)


async def test_an_entity_and_a_service_of_one_name_are_refused() -> None:
    files = {**SPEC, "ops/clash.yaml": SPEC["ops/tools.yaml"].replace("name: tools", "name: task")}
    with pytest.raises(config.SpecError, match="ops/task is also an entity"):
        load(files)


async def test_a_service_action_runs_its_handler_without_a_record(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/tools/echo", {"text": "hi", "times": 2})
    assert status == 200, answer
    assert answer["result"] == {
        "params": {"text": "hi", "times": 2},
        "entity": "ops/tools",
        "record": None,
        "user": "alice",
    }
    assert uuid.UUID(answer["event"])


async def test_params_are_validated_with_every_problem(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/tools/echo", {"times": "many"})
    assert status == 422 and answer["code"] == "SVC.ACTION.PARAMS_INVALID"
    assert {e["path"] for e in answer["errors"]} == {"text", "times"}


async def test_conditions_refuse_with_the_declared_message(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/tools/echo", {"text": "no"})
    assert status == 422, answer
    assert "Say something other than no." in str(answer)


async def test_audit_and_outbox_rows_are_written_with_the_call(srv: Running, pg_dsn: str) -> None:
    marker = f"audit-{uuid.uuid4().hex[:8]}"
    status, answer, _ = await post(srv, "ops/tools/echo", {"text": marker})
    assert status == 200
    conn = await asyncpg.connect(pg_dsn)
    try:
        audit = await conn.fetch(
            "SELECT entity, action, actor_username, changes::text AS changes FROM dap.audit_log "
            "WHERE entity = 'ops/tools' AND changes::text LIKE $1",
            f"%{marker}%",
        )
        event = await conn.fetchrow(
            "SELECT entity, record_id, event, payload::text AS payload FROM dap.outbox WHERE public_id = $1",
            uuid.UUID(answer["event"]),
        )
    finally:
        await conn.close()
    assert len(audit) == 1 and audit[0]["action"] == "echo" and audit[0]["actor_username"] == "alice"
    assert event is not None and event["entity"] == "ops/tools" and event["record_id"] is None
    assert event["event"] == "echoed" and marker in event["payload"]


async def test_idempotent_service_actions_replay_and_refuse_another_body(srv: Running, pg_dsn: str) -> None:
    key = uuid.uuid4().hex
    first = await post(srv, "ops/tools/echo", {"text": "once"}, **{"Idempotency-Key": key})
    again = await post(srv, "ops/tools/echo", {"text": "once"}, **{"Idempotency-Key": key})
    other = await post(srv, "ops/tools/echo", {"text": "twice"}, **{"Idempotency-Key": key})
    assert first[0] == again[0] == 200 and first[1] == again[1]
    assert again[2].get("idempotent-replayed") == "true"
    assert other[0] == 422 and other[1]["code"] == "SVC.IDEMPOTENCY.KEY_REUSED"
    conn = await asyncpg.connect(pg_dsn)
    try:
        events = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox "
            "WHERE entity = 'ops/tools' AND payload->'params'->>'text' = 'once'"
        )
    finally:
        await conn.close()
    assert events == 1  # one effect


async def test_public_actions_take_anonymous_callers_and_others_do_not(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/tools/hello", {}, auth=False)
    assert status == 200 and answer["result"]["user"] == ""
    status, answer, _ = await post(srv, "ops/tools/echo", {"text": "x"}, auth=False)
    assert status == 401 and "Authorization" in answer["detail"]


async def test_required_permission_is_enforced(srv: Running) -> None:
    nobody = {"Authorization": f"Bearer {token(roles=[])}"}
    status, answer, _ = await post(srv, "ops/tools/secret", {}, auth=False, **nobody)
    assert status == 403 and answer["code"] == "SVC.AUTH.FORBIDDEN"
    assert "ops.tools.secret" in answer["detail"]
    status, _, _ = await post(srv, "ops/tools/secret", {})  # admin holds everything
    assert status == 200


async def test_unknown_disabled_and_unexposed_actions_are_404(srv: Running) -> None:
    for name in ("nope", "off", "grpc_only"):
        status, answer, _ = await post(srv, f"ops/tools/{name}", {})
        assert status == 404 and answer["code"] == "SVC.ACTION.NOT_FOUND", name


async def test_what_cannot_run_here_is_501(srv: Running) -> None:
    status, answer, _ = await post(srv, "ops/tools/bridge", {})
    assert status == 501 and "--sidecar-endpoint" in answer["detail"]
    status, answer, _ = await post(srv, "ops/tools/empty", {})
    assert status == 501 and answer["code"] == "SVC.ACTION.NOT_IMPLEMENTED"


async def test_the_record_routes_beside_services_are_unchanged(srv: Running) -> None:
    status, answer, _ = await post(srv, "shop/product", {"sku": "S-1", "title": "t", "price": "1.00"})
    assert status == 201, answer
    pid = answer["data"]["id"]
    status, answer, headers = await post(srv, f"shop/product/{pid}", {})
    assert status == 405 and set(headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}
    status, answer, _ = await post(srv, "ops/nothing/x", {})
    assert status == 404
    for method in ("GET", "PATCH", "DELETE", "PUT", "TRACE"):  # a service action takes POST only
        async with srv.http.request(
            method, f"{srv.api}/default/api/ops/tools/echo", headers=srv.auth()
        ) as resp:
            assert (resp.status, resp.headers["Allow"]) == (405, "POST"), method
    async with srv.http.get(f"{srv.api}/default/api/ops/tools/nope", headers=srv.auth()) as resp:
        assert resp.status == 404  # no such action


async def test_openapi_describes_service_actions_and_jobs(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/api/openapi.json", headers=srv.auth()) as resp:
        doc = await resp.json()
    paths = doc["paths"]
    echo = paths["/api/ops/tools/echo"]["post"]
    body = echo["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["text"] and set(body["properties"]) == {"text", "times"}
    assert "200" in echo["responses"] and "429" in echo["responses"] and echo["summary"] == "Say it back"
    assert any(p["name"] == "Idempotency-Key" for p in echo["parameters"])
    assert paths["/api/ops/tools/hello"]["post"]["security"] == [{}, {"bearer": []}]  # public
    crunch = paths["/api/ops/tools/crunch"]["post"]
    assert "202" in crunch["responses"] and "200" not in crunch["responses"]
    assert any(p["name"] == "X-Reply-To" for p in crunch["parameters"])
    for left_out in ("off", "grpc_only", "bridge", "empty"):  # disabled, not REST, 501s
        assert f"/api/ops/tools/{left_out}" not in paths
    assert "/api/ops/tools/_jobs/{job}" in paths and "/api/ops/task/_jobs/{job}" in paths
    assert "202" in paths["/api/ops/task/{id}/finish"]["post"]["responses"]
    job = doc["components"]["schemas"]["Job"]
    assert {"id", "state", "progress"} <= set(job["required"])


async def test_ui_metadata_describes_services_and_how_actions_are_called(srv: Running) -> None:
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/services/ops/tools") as resp:
        assert resp.status == 200
        meta = (await resp.json())["data"]
    assert meta["api"] == "api/ops/tools" and meta["title"] == "Tools"
    by_name = {a["name"]: a for a in meta["actions"]}
    assert "off" not in by_name and "grpc_only" not in by_name
    assert [p["name"] for p in by_name["echo"]["params"]] == ["text", "times"]
    assert (
        by_name["hello"]["public"] is True and by_name["secret"]["required_permission"] == "ops.tools.secret"
    )
    assert (
        by_name["crunch"]["call"] == "async" and by_name["crunch"]["track"] and by_name["crunch"]["callback"]
    )
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/services/ops/nothing") as resp:
        assert resp.status == 404
    async with srv.http.get(f"{srv.api}/default/_ui/_meta/entities/ops/task") as resp:
        task = (await resp.json())["data"]
    finish = next(a for a in task["actions"] if a["name"] == "finish")
    assert finish["call"] == "async" and finish["track"] is True


async def test_concurrent_duplicates_of_one_key_have_one_effect(srv: Running, pg_dsn: str) -> None:
    key, text = uuid.uuid4().hex, f"dup-{uuid.uuid4().hex[:8]}"
    results = await asyncio.gather(
        *(post(srv, "ops/tools/echo", {"text": text}, **{"Idempotency-Key": key}) for _ in range(10))
    )
    statuses = sorted(r[0] for r in results)
    assert set(statuses) <= {200, 409} and 200 in statuses, statuses
    assert all(r[1]["code"] == "SVC.IDEMPOTENCY.IN_PROGRESS" for r in results if r[0] == 409)
    conn = await asyncpg.connect(pg_dsn)
    try:
        events = await conn.fetchval(
            "SELECT count(*) FROM dap.outbox WHERE payload->'params'->>'text' = $1", text
        )
    finally:
        await conn.close()
    assert events == 1
