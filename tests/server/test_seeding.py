"""Seed rows loaded into a workspace (``workflows.seeding``, ``dap seed``) on a real Postgres.

The demo's own seed (examples/procurement/seed) is the main case: it must load every state the
apps show, a second run must add nothing, a changed row must update or say why not, and a bad
row must load nothing and name its file, line and field.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from dap.server import booting, state
from dap.server.access import accounts
from dap.server.catalog import Catalog
from dap.server.cli import load_catalog
from dap.server.storage import db, workspaces
from dap.server.workflows import seeding, seeds
from tests.conftest import drop_database, new_database

from .conftest import running

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "examples" / "procurement"
DAP = str(Path(sys.executable).parent / "dap")
TODAY = dt.date.today()


def demo_rows() -> list[seeds.Row]:
    files = [(p.name, p.read_text()) for p in sorted((SPEC / "seed").glob("*.yaml"))]
    return seeds.parse_files(files)


@pytest.fixture(scope="module")
def demo() -> Catalog:
    return load_catalog(SPEC)


@pytest.fixture
async def pool(pg_server_dsn: str, demo: Catalog) -> AsyncIterator[asyncpg.Pool]:
    name, dsn = await new_database(pg_server_dsn)
    opened = await db.open_pool(dsn, 2)
    try:
        await booting.prepare_database(opened, demo)
        yield opened
    finally:
        await opened.close()
        await drop_database(pg_server_dsn, name)


async def _tenant(conn: Any) -> Any:
    found = await workspaces.find(conn, "default")
    assert found is not None
    return found.tenant_id


async def _orders(conn: Any) -> list[tuple[str, str, str]]:
    rows = await conn.fetch(
        'SELECT number, docstatus, state FROM "buying__purchase_order" ORDER BY order_date DESC, number'
    )
    return [
        (r["number"], {0: "draft", 1: "submitted", 2: "cancelled"}[r["docstatus"]], r["state"]) for r in rows
    ]


async def test_the_demo_seed_loads_every_state_through_the_api_rules(
    pool: asyncpg.Pool, demo: Catalog
) -> None:
    rows = demo_rows()
    async with pool.acquire() as conn:
        report = await seeding.load(conn, demo, await _tenant(conn), rows)
        # every row is a record or an account but the one closing a period (an action)
        assert (report.created, report.updated, report.unchanged, report.notes) == (len(rows) - 1, 0, 0, [])
        assert report.by_entity == {
            "users": 8,
            "stock/item": 8,
            "buying/supplier": 6,
            "buying/purchase_order": 8,
            "ledger/journal_entry": 4,
        }
        orders = await _orders(conn)
        assert {(d, s) for _, d, s in orders} == {
            ("draft", "open"),
            ("submitted", "open"),
            ("submitted", "pending_approval"),
            ("submitted", "approved"),
            ("submitted", "rejected"),
            ("cancelled", "open"),
        }
        year = TODAY.year
        assert all(n.startswith(f"PO-{year}-") for n, _, _ in orders)  # the engine numbered them
        # derived values ran: line prices filled from the item, totals computed
        total = await conn.fetchval(
            'SELECT total FROM "buying__purchase_order" o JOIN dap.seed_records s ON s.record_id = o.id '
            "WHERE s.key = 'draft-north'"
        )
        assert str(total) == "510.50"  # 250 kg x 1.85 + 400 x 0.12
        # one approval at the committee step without a vote: the committee members' inboxes
        approvals = await conn.fetch("SELECT status, step_name, votes, requester_username FROM dap.approvals")
        assert sorted((a["status"], a["step_name"], a["votes"]) for a in approvals) == [
            ("approved", "manager", 0),  # votes count the current step
            ("pending", "committee", 0),
            ("pending", "manager", 0),
            ("rejected", "committee", 0),
        ]
        assert {a["requester_username"] for a in approvals} == {"seed"}
        # the audit trail and the outbox carry the run, as the API's writes do
        trail = await conn.fetch(
            "SELECT action, count(*) AS n FROM dap.audit_log WHERE request_id LIKE 'seed-%' GROUP BY action"
        )
        counted = {r["action"]: r["n"] for r in trail}
        assert (counted["submit"], counted["cancel"], counted["approval.requested"]) == (9, 1, 4)
        assert counted["approval.approved-vote"] == 5 and counted["approval.rejected"] == 1
        events = await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE event = 'created'")
        assert events == len(rows) - 9  # every record; accounts and the period's close are no records
        # the ledger: the month of today-62 closed after its entries, with their closing balances;
        # the current month open; the balances are the submitted entries' (the draft's not)
        closed = await conn.fetchrow(
            "SELECT id, state, reason FROM dap.periods WHERE starts <= $1 AND ends >= $1",
            TODAY - dt.timedelta(62),
        )
        assert (closed["state"], closed["reason"]) == ("closed", "Books closed for the month (demo seed)")
        assert (
            await conn.fetchval("SELECT state FROM dap.periods WHERE starts <= $1 AND ends >= $1", TODAY)
            == "open"
        )
        closing = await conn.fetch(
            "SELECT grp->>'account' AS account, sums->>'balance' AS balance FROM dap.period_balances "
            "WHERE period_id = $1 ORDER BY 1",
            closed["id"],
        )
        assert [(r["account"], r["balance"]) for r in closing] == [
            ("1200 Bank", "50000.00"),
            ("2000 Payables", "-12400.00"),
            ("3000 Equity", "-50000.00"),
            ("5000 Purchases", "12400.00"),
        ]
        balances = await conn.fetch("SELECT account, balance FROM ledger__account_balance ORDER BY account")
        assert [(r["account"], str(r["balance"])) for r in balances] == [
            ("1200 Bank", "37600.00"),
            ("2000 Payables", "0.00"),
            ("3000 Equity", "-50000.00"),
            ("5000 Purchases", "12400.00"),
        ]
        # the demo's people can sign in: hashed passwords, the spec's roles
        ada = await conn.fetchrow("SELECT password_hash, roles FROM dap.users WHERE username = 'ada'")
        assert ada["roles"] == ["purchase_committee"]
        assert accounts.check_password("procurement-demo", ada["password_hash"])


async def test_a_second_run_adds_nothing(pool: asyncpg.Pool, demo: Catalog) -> None:
    rows = demo_rows()
    async with pool.acquire() as conn:
        tenant = await _tenant(conn)
        await seeding.load(conn, demo, tenant, rows)
        before = await _orders(conn)
        again = await seeding.load(conn, demo, tenant, rows)
        assert (again.created, again.updated, again.unchanged, again.actions) == (0, 0, len(rows), 0)
        assert await _orders(conn) == before
        assert await conn.fetchval('SELECT count(*) FROM "stock__item"') == 8


async def test_a_changed_row_updates_where_the_api_would_and_says_why_not_elsewhere(
    pool: asyncpg.Pool, demo: Catalog
) -> None:
    rows = demo_rows()
    async with pool.acquire() as conn:
        tenant = await _tenant(conn)
        await seeding.load(conn, demo, tenant, rows)
        changed = []
        for row in rows:
            if row.values.get("code") == "BOLT-M8":
                row = seeds.Row(**{**vars(row), "values": {**row.values, "title": "Hex bolt M8 x 45"}})
            if row.key in ("draft-north", "submitted-north"):
                lines = [{**line, "qty": 1} for line in row.values["lines"]]
                row = seeds.Row(**{**vars(row), "values": {**row.values, "lines": lines}})
            changed.append(row)
        await conn.execute(
            'DELETE FROM "buying__supplier" WHERE code = $1', "ADRIA-SAFE"
        )  # by hand, behind the API's back: the seed must not make it again
        report = await seeding.load(conn, demo, tenant, changed)
        assert (report.created, report.updated) == (0, 2)
        assert (
            await conn.fetchval('SELECT title FROM "stock__item" WHERE code = $1', "BOLT-M8")
            == "Hex bolt M8 x 45"
        )
        assert len(report.notes) == 1 and "submitted-north" in report.notes[0]
        assert "a submitted document cannot change" in report.notes[0]
        edited = await conn.fetchval(
            'SELECT version FROM "buying__purchase_order" o JOIN dap.seed_records s ON s.record_id = o.id '
            "WHERE s.key = 'draft-north'"
        )
        assert edited == 2  # updated once, through the update path
        # the deleted supplier is unchanged in the seed: not made again, nothing said
        assert await conn.fetchval('SELECT count(*) FROM "buying__supplier"') == 5


async def test_a_row_naming_an_existing_record_by_natural_key_adopts_it(
    pool: asyncpg.Pool, demo: Catalog
) -> None:
    rows = [r for r in demo_rows() if r.entity == "stock/item"][:1]
    async with pool.acquire() as conn:
        tenant = await _tenant(conn)
        await conn.execute(
            'INSERT INTO "stock__item" (tenant_id, code, title, unit_price) VALUES ($1, $2, $3, 1)',
            tenant,
            "BOLT-M8",
            "typed by hand",
        )
        report = await seeding.load(conn, demo, tenant, rows)
        assert (report.created, report.adopted, report.updated) == (0, 1, 1)
        assert str(await conn.fetchval('SELECT unit_price FROM "stock__item"')) == "0.12"
        assert (await seeding.load(conn, demo, tenant, rows)).unchanged == 1


BAD = """\
entity: buying/supplier
records:
  - {code: GOOD-ONE, name: Fine, region: north}
  - code: BAD-ONE
    name: Too good
    rating: 9
  - {code: LOST, name: Nowhere, region: west}
---
entity: buying/purchase_order
records:
  - _key: x
    supplier: GOOD-ONE
    order_date: today
    region: north
    lines:
      - {item: NO-SUCH-ITEM, qty: 1}
"""


async def test_a_bad_row_loads_nothing_and_names_file_line_and_field(
    pool: asyncpg.Pool, demo: Catalog
) -> None:
    rows = [r for r in demo_rows() if r.entity == "stock/item"] + seeds.parse_yaml("seed/20-bad.yaml", BAD)
    async with pool.acquire() as conn:
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, demo, await _tenant(conn), rows)
        said = [str(p) for p in caught.value.problems]
        assert said[0].startswith("seed/20-bad.yaml:6: rating: ")
        assert said[1].startswith("seed/20-bad.yaml:7: region: ")
        assert said[2].startswith("seed/20-bad.yaml:16: lines[0].item: no stock/item with seed key or code")
        assert said[2].endswith("(SVC.VALIDATE.RELATION_NOT_FOUND)")  # issue 40 row 15
        assert len(said) == 3
        assert all(CODED.search(line) for line in said), said
        assert "nothing was loaded" in str(caught.value)
        for table in ("stock__item", "buying__supplier", "buying__purchase_order"):
            assert await conn.fetchval(f'SELECT count(*) FROM "{table}"') == 0
        assert await conn.fetchval("SELECT count(*) FROM dap.seed_records") == 0
        assert await conn.fetchval("SELECT count(*) FROM dap.outbox") == 0


CODED = re.compile(r" \(SVC\.[A-Z]+\.[A-Z_]+\)$")  # how every problem line of a run ends


@pytest.mark.parametrize(
    ("text", "field", "code"),
    [
        pytest.param(
            "entity: buying/supplier\nrecords:\n  - {code: S-1, name: S, region: north, rating: 9}\n",
            "rating",
            "SVC.VALIDATE.RULE_FAILED",
            id="invalid-value",
        ),
        pytest.param(
            "entity: buying/purchase_order\nrecords:\n  - {_key: o, supplier: NORDSTAHL, order_date: today, "
            "region: north, lines: [{item: NOPE, qty: 1}]}\n",
            "lines[0].item",
            "SVC.VALIDATE.RELATION_NOT_FOUND",
            id="missing-key",
        ),
        pytest.param(
            "entity: buying/purchase_order\nrecords:\n  - {_key: o, supplier: NOBODY, order_date: today, "
            "region: north}\n",
            "supplier",
            "SVC.VALIDATE.RELATION_NOT_FOUND",
            id="missing-key-by-seed-key",
        ),
        pytest.param(
            "entity: stock/nothing\nrecords:\n  - {code: X}\n", None, "SVC.ENTITY.NOT_FOUND", id="entity"
        ),
        pytest.param(
            "entity: buying/purchase_order\nrecords:\n  - {order_date: today, region: north}\n",
            "_key",
            "SVC.SEED.KEY",
            id="no-key",
        ),
        pytest.param(
            "entity: stock/item\nrecords:\n"
            "  - {code: I-2, title: I, unit_price: 1, uom: piece, _submit: true}\n",
            "_submit",
            "SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE",
            id="submit-without-lifecycle",
        ),
        pytest.param(
            "entity: users\nrecords:\n  - {username: ada, password: short}\n",
            "password",
            "SVC.VALIDATE.INVALID",
            id="account",
        ),
        pytest.param(
            "entity: buying/purchase_order\nrecords:\n  - {_key: o, supplier: NORDSTAHL, order_date: today, "
            "region: north, _actions: [fly]}\n",
            "_actions",
            "SVC.SEED.STEP",
            id="step",
        ),
    ],
)
async def test_every_problem_line_of_a_run_carries_its_code(
    pool: asyncpg.Pool, demo: Catalog, text: str, field: str | None, code: str
) -> None:
    """Issue 40 row 15: a row naming a missing key said so without a code; every kind has one."""
    base = [r for r in demo_rows() if r.entity in ("stock/item", "buying/supplier")]
    async with pool.acquire() as conn:
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, demo, await _tenant(conn), base + seeds.parse_yaml("p.yaml", text))
    [line] = [str(p) for p in caught.value.problems]
    assert line.startswith(f"p.yaml:3: {field}: " if field else "p.yaml:3: "), line
    assert line.endswith(f" ({code})"), line


async def test_an_account_row_is_checked_like_the_setup(pool: asyncpg.Pool, demo: Catalog) -> None:
    text = "entity: users\nrecords:\n  - {username: ada, password: short, roles: [wizard]}\n"
    async with pool.acquire() as conn:
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, demo, await _tenant(conn), seeds.parse_yaml("u.yaml", text))
        assert [str(p) for p in caught.value.problems] == [
            "u.yaml:3: password: a string of at least 8 characters (SVC.VALIDATE.INVALID)",
            "u.yaml:3: roles: no role 'wizard' in this spec (SVC.VALIDATE.INVALID)",
        ]
        assert await conn.fetchval("SELECT count(*) FROM dap.users") == 0


async def test_an_engine_numbered_record_without_a_key_is_refused(pool: asyncpg.Pool, demo: Catalog) -> None:
    text = "entity: buying/purchase_order\nrecords:\n  - {supplier: X, order_date: today, region: north}\n"
    async with pool.acquire() as conn:
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, demo, await _tenant(conn), seeds.parse_yaml("o.yaml", text))
    assert str(caught.value.problems[0]).startswith("o.yaml:3: _key: give _key: its natural key 'number'")


# --- dap seed ------------------------------------------------------------------------------------


def _dap_seed(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    return subprocess.run([DAP, "seed", *args], capture_output=True, text=True, env=env, timeout=120)


async def test_dap_seed_loads_once_and_refuses_a_bad_seed_naming_the_row(
    pg_server_dsn: str, tmp_path: Path
) -> None:
    name, dsn = await new_database(pg_server_dsn)
    try:
        first = _dap_seed(str(SPEC), "--dsn", dsn, "--workspace", "default")
        assert first.returncode == 0, first.stderr
        assert "34 created, 0 updated, 0 unchanged" in first.stdout
        second = _dap_seed(str(SPEC), "--dsn", dsn)
        assert second.returncode == 0, second.stderr
        assert "0 created, 0 updated, 35 unchanged" in second.stdout
        bad = tmp_path / "seed"
        bad.mkdir()
        (bad / "10-items.yaml").write_text(
            "entity: stock/item\nrecords:\n  - {code: A, title: A, unit_price: x}\n"
        )
        refused = _dap_seed(str(tmp_path), "--spec", str(SPEC), "--dsn", dsn)
        assert refused.returncode == 1
        assert "dap seed: 10-items.yaml:3: unit_price: " in refused.stderr
        assert "nothing was loaded" in refused.stderr
        missing = _dap_seed(str(SPEC), "--dsn", dsn, "--workspace", "nowhere")
        assert missing.returncode == 1 and "no workspace 'nowhere'" in missing.stderr
    finally:
        await drop_database(pg_server_dsn, name)


async def test_csv_rows_load_through_the_same_path(pool: asyncpg.Pool, demo: Catalog) -> None:
    """What issue 29's CSV import will call: rows in, one transaction, file/line/field out."""
    good = "code,title,unit_price,uom\nC-1,Cable tie,0.05,piece\nC-2,Clamp,1.10,box\n"
    bad = "code,title,unit_price,uom\nC-3,Cord,0.20,piece\nC-4,Crate,2.00,barrel\n"
    async with pool.acquire() as conn:
        tenant = await _tenant(conn)
        with pytest.raises(seeding.SeedError) as caught:
            await seeding.load(conn, demo, tenant, seeds.parse_files([("stock.item.csv", bad)]))
        assert [str(p).split(": must")[0] for p in caught.value.problems] == ["stock.item.csv:3: uom"]
        assert await conn.fetchval('SELECT count(*) FROM "stock__item"') == 0
        report = await seeding.load(conn, demo, tenant, seeds.parse_files([("stock.item.csv", good)]))
        assert report.created == 2
        prices = await conn.fetch('SELECT code, unit_price FROM "stock__item" ORDER BY code')
        assert [(r["code"], str(r["unit_price"])) for r in prices] == [("C-1", "0.05"), ("C-2", "1.10")]


# --- seeded votes are the named account's own ------------------------------------------------------

VOTED = """\
entity: buying/purchase_order
records:
  - _key: one-vote-in
    supplier: BALTIC-OIL
    order_date: today
    region: north
    lines:
      - {item: OIL-HLP46, qty: 600}
    _submit: true
    _actions: [request_approval, approve]
    _votes:
      - {as: ada, roles: [purchase_committee]}
"""


async def test_a_seeded_vote_is_the_accounts_own_so_she_cannot_vote_again(
    pg_server_dsn: str, demo: Catalog
) -> None:
    """Issue 40 row 14: a vote seeded ``as: ada`` is stored under ada's account (the principal her
    sign-in carries), so her own vote afterwards is her second one (409), not the quorum's second."""
    rows = [r for r in demo_rows() if r.entity != "buying/purchase_order"]
    rows += seeds.parse_yaml("seed/40-voted.yaml", VOTED)
    name, dsn = await new_database(pg_server_dsn)
    try:
        async with running(dsn, demo) as srv:
            async with srv.server.app[state.POOL].acquire() as conn:
                await seeding.load(conn, demo, await _tenant(conn), rows)
                ada_id = await conn.fetchval("SELECT id FROM dap.users WHERE username = 'ada'")
                vote = await conn.fetchrow("SELECT approval_id, principal_sub FROM dap.approval_votes")
            assert vote["principal_sub"] == str(ada_id)  # what her live vote stores, not seed:ada
            approve = f"{srv.api}/default/api/_approvals/{vote['approval_id']}/approve"
            for who, status, code in (("ada", 409, "SVC.APPROVAL.ALREADY_VOTED"), ("bert", 200, None)):
                login = {"username": who, "password": "procurement-demo"}
                async with srv.http.post(f"{srv.api}/default/_ui/login", json=login) as resp:
                    assert resp.status == 200, await resp.text()
                    bearer = {"Authorization": f"Bearer {(await resp.json())['token']}"}
                async with srv.http.post(approve, json={}, headers=bearer) as resp:
                    body = await resp.json()
                    assert resp.status == status, body
                    assert body.get("code") == code, body
            async with srv.server.app[state.POOL].acquire() as conn:
                moved = await conn.fetchrow("SELECT step_name, votes FROM dap.approvals")
            assert (moved["step_name"], moved["votes"]) == ("manager", 0)  # two people made the quorum
    finally:
        await drop_database(pg_server_dsn, name)


async def test_a_seeded_vote_needs_the_account_and_only_its_roles(pool: asyncpg.Pool, demo: Catalog) -> None:
    base = [r for r in demo_rows() if r.entity != "buying/purchase_order"]
    for given, said in (
        ("{as: pia, roles: [purchase_committee]}", "no account 'pia'"),
        ("{as: anna, roles: [purchase_committee]}", "anna does not hold the role purchase_committee"),
    ):
        text = VOTED.replace("{as: ada, roles: [purchase_committee]}", given)
        async with pool.acquire() as conn:
            with pytest.raises(seeding.SeedError) as caught:
                await seeding.load(conn, demo, await _tenant(conn), base + seeds.parse_yaml("v.yaml", text))
        [problem] = caught.value.problems
        assert str(problem).startswith("v.yaml:11: _votes: "), str(problem)
        assert said in str(problem) and str(problem).endswith("(SVC.SEED.STEP)"), str(problem)
