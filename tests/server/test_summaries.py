"""Summary entities: account balances the engine keeps from submitted journal entries.

Submit adds a document's lines to the balances of their accounts and cancel takes them away, in
the move's transaction; a storm of concurrent submits and cancels leaves the balances exactly equal
to a recomputation from the documents; every direct write of a summary -- REST, gRPC, ws, seed,
import, bridge /ctx (tests/bridge) -- is 409 SVC.PERSIST.CROSS_CATEGORY."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import aiohttp
import grpc
import pytest
import pytest_asyncio

from dap import config
from dap.server import state
from dap.server.rpc import server as rpc_server
from dap.server.web import app, ui_meta
from dap.server.workflows import seeding, seeds

from .conftest import Running, load, serve_options, token
from .protocols_clients import Grpc, Rest, Ws
from .services_spec import install_handlers

pytestmark = pytest.mark.asyncio(loop_scope="module")

CROSS = "SVC.PERSIST.CROSS_CATEGORY"
SPEC = {
    "sales/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: sales}
spec:
  title: Ledger
  api: {grpc: {enabled: true, package: acme.sales.v1}}
""",
    "sales/journal.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: journal, module: sales}
spec:
  characteristic: transaction
  lifecycle: true
  fields:
    - {name: posting_date, type: date, required: true}
    - name: lines
      type: child
      child:
        storage: table
        fields:
          - {name: account, type: string, required: true}
          - {name: debit, type: money, scale: 2}
          - {name: credit, type: money, scale: 2}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
""",
    "sales/balance.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: balance, module: sales}
spec:
  characteristic: summary
  fields:
    - {name: account, type: string}
    - {name: debit, type: money, scale: 2}
    - {name: credit, type: money, scale: 2}
    - {name: balance, type: money, scale: 2}
  summary:
    source: sales/journal
    lines: lines
    group_by: [account]
    sum:
      - {field: debit, add: debit}
      - {field: credit, add: credit}
      - {field: balance, add: debit, subtract: credit}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
""",
}
ADMIN = f"Bearer {token(sub='u-root', username='root', roles=['admin'])}"
ACCOUNTS = ("cash", "bank", "sales", "stock", "tax")


class Srv:
    def __init__(self, running: Running, rest: Rest, rpc: Grpc, ws: Ws) -> None:
        self.running, self.rest, self.rpc, self.ws = running, rest, rpc, ws

    async def balances(self) -> dict[str, tuple[Decimal, Decimal, Decimal]]:
        async with self.running.server.app[state.POOL].acquire() as conn:
            rows = await conn.fetch("SELECT account, debit, credit, balance FROM sales__balance")
        return {r["account"]: (r["debit"], r["credit"], r["balance"]) for r in rows}

    async def recomputed(self) -> dict[str, tuple[Decimal, Decimal, Decimal]]:
        """The balances from the documents themselves: the submitted journals' lines."""
        async with self.running.server.app[state.POOL].acquire() as conn:
            rows = await conn.fetch(
                "SELECT l.account, sum(coalesce(l.debit, 0)) AS d, sum(coalesce(l.credit, 0)) AS c "
                "FROM sales__journal__lines l JOIN sales__journal j ON j.id = l.parent_id "
                "AND j.tenant_id = l.tenant_id WHERE j.docstatus = 1 GROUP BY l.account"
            )
        return {r["account"]: (r["d"], r["c"], r["d"] - r["c"]) for r in rows}


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = install_handlers(tmp_path_factory.mktemp("summary-handlers"))
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, registered: None) -> AsyncIterator[Srv]:
    server = await app.create_server(serve_options(pg_dsn, grpc_addr="127.0.0.1:0", pool_size=10), load(SPEC))
    rpc = rpc_server.attach(server.app, server.opts)
    assert isinstance(rpc, rpc_server.RpcServer)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, grpc.aio.insecure_channel(f"127.0.0.1:{rpc.port}") as ch:
            assert rpc.pool is not None
            running = Running(server, http)
            yield Srv(running, Rest(running), Grpc(ch, rpc.pool), Ws(running))
    finally:
        await server.stop()


def _lines(rng: random.Random) -> list[dict[str, Any]]:
    a, b = rng.sample(ACCOUNTS, 2)
    amount = f"{rng.randint(1, 9999) / 100:.2f}"
    return [{"account": a, "debit": amount}, {"account": b, "credit": amount}]


async def test_submit_adds_and_cancel_takes_away(srv: Srv) -> None:
    body = {
        "posting_date": "2026-11-02",
        "lines": [{"account": "cash", "debit": "10.00"}, {"account": "sales", "credit": "10.00"}],
    }
    code, entry = await srv.rest.create("journal", body, ADMIN)
    assert code == "ok", entry
    assert "cash" not in await srv.balances()  # a draft sums nothing
    code, _ = await srv.rest.act("journal", entry["id"], "submit", ADMIN)
    assert code == "ok"
    got = await srv.balances()
    assert got["cash"] == (Decimal("10.00"), Decimal("0.00"), Decimal("10.00"))
    assert got["sales"] == (Decimal("0.00"), Decimal("10.00"), Decimal("-10.00"))
    code, _ = await srv.rest.create("journal", body, ADMIN, submit=True)  # create-and-submit
    assert code == "ok"
    assert (await srv.balances())["cash"][2] == Decimal("20.00")
    code, _ = await srv.rest.act("journal", entry["id"], "cancel", ADMIN)
    assert code == "ok"
    assert (await srv.balances())["cash"][2] == Decimal("10.00")
    assert await srv.balances() == await srv.recomputed()


@pytest.mark.parametrize("client", ["rest", "rpc", "ws"])
async def test_a_direct_write_of_a_summary_is_refused(srv: Srv, client: str) -> None:
    c = getattr(srv, client)
    code, _ = await c.create("balance", {"account": "cash", "balance": "1000000.00"}, ADMIN)
    assert code == CROSS
    code, rows = await c.list("balance", "", ADMIN)
    assert code == "ok"
    some = next(iter(rows), None) if isinstance(rows, list) else None
    if some is not None:
        code, _ = await c.update("balance", some["id"], {"balance": "0.00"}, ADMIN)
        assert code == CROSS
        code, _ = await c.delete("balance", some["id"], ADMIN)
        assert code == CROSS


async def test_the_refusal_says_who_writes_a_summary(srv: Srv) -> None:
    status, answer, _ = await srv.rest._call("POST", "balance", ADMIN, {"account": "x"})
    assert status == 409 and answer["type"] == f"urn:dap:error:{CROSS}", answer
    assert "submitted sales/journal documents" in answer["detail"]


async def test_a_seed_or_import_row_of_a_summary_is_refused(srv: Srv) -> None:
    rows = seeds.parse_yaml("b.yaml", "entity: sales/balance\nrecords:\n  - {_key: x, account: cash}\n")
    application = srv.running.server.app
    async with application[state.POOL].acquire() as conn:
        tenant = (await application[state.REGISTRY].resolve("default")).tenant_id
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, application[state.SPEC].current, tenant, rows)
    assert caught.value.problems[0].code == CROSS
    headers = {"Authorization": ADMIN, "Content-Type": "text/csv"}
    url = f"{srv.running.api}/default/api/sales/balance/_import"
    async with srv.running.http.post(url, data="_key,account\ny,bank\n", headers=headers) as resp:
        answer = await resp.json()
    assert answer.get("code") == CROSS or answer["problems"][0]["code"] == CROSS, answer


STORM_DOCS = 40
STORM_WORKERS = 8


async def test_balances_equal_a_recomputation_after_a_storm_of_submits_and_cancels(srv: Srv) -> None:
    rng = random.Random(43)
    drafts = []
    for _ in range(STORM_DOCS):
        code, entry = await srv.rest.create(
            "journal", {"posting_date": "2026-11-03", "lines": _lines(rng)}, ADMIN
        )
        assert code == "ok", entry
        drafts.append(entry["id"])
    queue: asyncio.Queue[str] = asyncio.Queue()
    for d in drafts:
        queue.put_nowait(d)
    moved: list[str] = []

    async def worker(client: Any, seed: int) -> None:
        local = random.Random(seed)
        while not queue.empty():
            record = queue.get_nowait()
            code, _ = await client.act("journal", record, "submit", ADMIN)
            assert code == "ok", code
            if local.random() < 0.5:  # cancel half of them, while others submit
                code, _ = await client.act("journal", record, "cancel", ADMIN)
                assert code == "ok", code
            moved.append(record)

    clients = [srv.rest, srv.rpc, srv.ws]
    await asyncio.wait_for(
        asyncio.gather(*(worker(clients[i % 3], i) for i in range(STORM_WORKERS))), timeout=120
    )
    assert len(moved) == STORM_DOCS
    assert await srv.balances() == await srv.recomputed()


async def test_closing_a_period_writes_its_closing_balances(srv: Srv) -> None:
    later = {
        "posting_date": "2026-12-05",
        "lines": [{"account": "cash", "debit": "7.00"}, {"account": "tax", "credit": "7.00"}],
    }
    code, _ = await srv.rest.create("journal", later, ADMIN, submit=True)  # after the period: not in it
    assert code == "ok"
    api = f"{srv.running.api}/default/api/_periods"
    headers = {"Authorization": ADMIN}
    body = {"name": "2026-11", "starts": "2026-11-01", "ends": "2026-11-30"}
    async with srv.running.http.post(api, json=body, headers=headers) as resp:
        period = (await resp.json())["data"]
    async with srv.running.http.get(f"{api}/{period['id']}/balances", headers=headers) as resp:
        assert (await resp.json())["data"] == []  # open: nothing closed yet
    async with srv.running.http.post(
        f"{api}/{period['id']}/close", json={"reason": "Nov"}, headers=headers
    ) as r:
        assert r.status == 200, await r.text()
    async with srv.running.http.get(f"{api}/{period['id']}/balances", headers=headers) as resp:
        closing = (await resp.json())["data"]
    async with srv.running.server.app[state.POOL].acquire() as conn:
        rows = await conn.fetch(
            "SELECT l.account, sum(coalesce(l.debit, 0) - coalesce(l.credit, 0)) AS b "
            "FROM sales__journal__lines l JOIN sales__journal j ON j.id = l.parent_id "
            "WHERE j.docstatus = 1 AND j.posting_date <= '2026-11-30' GROUP BY l.account"
        )
    expected = {r["account"]: r["b"] for r in rows}
    assert {c["group"]["account"]: Decimal(c["sums"]["balance"]) for c in closing} == expected
    assert all(c["entity"] == "sales/balance" for c in closing)
    assert (await srv.balances())["cash"][2] == expected["cash"] + Decimal("7.00")  # the running total


async def test_a_summary_without_a_maintainable_declaration_is_refused() -> None:
    broken = dict(SPEC)
    broken["sales/balance.yaml"] = SPEC["sales/balance.yaml"].replace("add: debit}", "add: account}", 1)
    with pytest.raises(config.SpecError) as caught:
        config.load_files(broken)
    assert any("spec.summary.sum[0].add" in str(p) for p in caught.value.problems)


async def test_the_ui_is_offered_a_summary_read_only() -> None:
    meta = ui_meta.entity_meta(load(SPEC), "sales/balance")
    assert meta["rest"] == ["find", "list"] and meta["characteristic"] == "summary"
    assert "create" in ui_meta.entity_meta(load(SPEC), "sales/journal")["rest"]
