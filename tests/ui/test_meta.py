"""The metadata the UI needs beyond the entity meta: page components, each action's permission,
the actions this server runs, and ``GET /{ws}/_ui/_meta/me`` (the caller's permissions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dap import config
from dap.server.catalog import Catalog
from tests.conftest import drop_database, new_database
from tests.server.conftest import Running, running

PROCUREMENT = Path(__file__).resolve().parents[2] / "examples" / "procurement"


async def _get(srv: Running, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with srv.http.get(srv.api + path, headers=headers or {}) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_ui_facts(pg_dsn: str) -> None:
    catalog = Catalog.from_spec(config.load_spec(PROCUREMENT))
    async with running(pg_dsn, catalog) as srv:
        status, body = await _get(srv, "/default/_ui/_meta/apps")
        assert body["workspace"] == {
            "slug": "default",
            "title": "Procurement demo",
            "theme": None,
            "logo": None,
            "favicon": None,
        }
        status, body = await _get(srv, "/default/_ui/_meta/apps/buying/purchasing")
        assert status == 200
        components = body["data"]["components"]
        assert components["buying/purchase_orders"]["kind"] == "table"
        assert components["buying/purchase_orders"]["entity"] == "buying/purchase_order"
        assert components["buying/purchase_order_form"]["kind"] == "form"  # named by a block and a table
        assert components["buying/suppliers"]["columns"][0] == {"field": "code", "sortable": True}
        assert components["buying/orders_by_state"]["kind"] == "kanban"
        assert components["buying/orders_by_state"]["group_by"] == "state"  # the machine's field
        overview = components["buying/buying_overview"]
        assert overview["kind"] == "dashboard" and overview["widgets"][0]["ref"] == "buying/purchase_order"
        assert components["buying/purchase_orders"]["kind"] == "table"  # named by a list widget

        status, body = await _get(srv, "/default/_ui/_meta/entities/buying/purchase_order")
        meta = body["data"]
        permissions = {a["name"]: a["required_permission"] for a in meta["actions"]}
        # approve (requesting the gated transition) needs no permission: its gate's steps decide who
        # votes; the approval itself is described on the transition
        assert permissions["approve"] is None and permissions["submit"] is None
        assert meta["runnable"] == ["approve", "reopen", "request_approval"]
        gate = next(t for t in meta["state_machine"]["transitions"] if t["action"] == "approve")["approval"]
        assert [(s["name"], s["approvers"], s["roles"]) for s in gate["steps"]] == [
            ("committee", 2, ["purchase_committee"]),
            ("manager", 1, ["buying_manager"]),
        ]
        assert gate["on_reject"] == "rejected"

        # chrome.regions naming a component: it is among the app's components
        status, body = await _get(srv, "/default/_ui/_meta/apps/buying/review")
        assert body["data"]["chrome"]["regions"] == {"rightbar": "buying/recent_orders"}
        assert body["data"]["components"]["buying/recent_orders"]["kind"] == "listing"

        status, body = await _get(srv, "/default/_ui/_meta/entities/buying/supplier")
        iban = next(f for f in body["data"]["fields"] if f["name"] == "iban")
        assert iban["required_permission"] == "buying.supplier.read_bank"

        assert (await _get(srv, "/default/_ui/_meta/me"))[0] == 401
        status, body = await _get(srv, "/default/_ui/_meta/me", srv.auth(username="fin", roles=["finance"]))
        assert status == 200
        me = body["data"]
        assert me["username"] == "fin" and me["roles"] == ["finance"]
        assert me["permissions"]["buying.supplier.read_bank"] is True
        assert me["permissions"]["buying.purchase_order.all_rows"] is True
        assert me["permissions"]["buying.purchase_order.backdate"] is False
        status, body = await _get(srv, "/default/_ui/_meta/me", srv.auth(username="bob", roles=["buyer"]))
        assert body["data"]["permissions"]["buying.supplier.read_bank"] is False


SAGAS = Path(__file__).resolve().parents[2] / "examples" / "sagas" / "spec"


async def test_me_says_who_may_resolve_sagas(pg_server_dsn: str) -> None:
    """The shell links to ``#/sagas`` for whoever holds a saga action's resolve permission."""
    catalog = Catalog.from_spec(config.load_spec(SAGAS))
    name, dsn = await new_database(pg_server_dsn)  # the procurement's tables are in pg_dsn
    try:
        async with running(dsn, catalog) as srv:
            for roles, resolves in ((["buying_manager"], True), (["clerk"], False)):
                status, body = await _get(srv, "/default/_ui/_meta/me", srv.auth(roles=roles))
                assert status == 200, body
                assert body["data"]["resolves_sagas"] is resolves
                assert body["data"]["permissions"]["buying.ordering.resolve"] is resolves
    finally:
        await drop_database(pg_server_dsn, name)
