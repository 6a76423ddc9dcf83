"""The backdate policy over real HTTP: transaction dates too far back or ahead, the override
permission, a missing transaction date, and updates that do or do not change the date."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from .access_spec import ACCESS, as_, call, new
from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLERK = as_("carl", "clerk")
MANAGER = as_("mona", "manager")  # holds sales.posting.backdate


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(ACCESS)) as r:
        yield r


def day(offset: int) -> str:
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=offset)).isoformat()


@pytest.mark.parametrize(
    ("body", "who", "status", "code"),
    [
        pytest.param({"posting_date": day(0)}, CLERK, 201, None, id="today"),
        pytest.param({"posting_date": "today"}, CLERK, 201, None, id="today-word"),
        pytest.param({"posting_date": day(-9)}, CLERK, 201, None, id="inside-back"),
        pytest.param({"posting_date": day(-11)}, CLERK, 422, "SVC.TXN.BACKDATE_EXCEEDED", id="too-old"),
        pytest.param({"posting_date": day(-400)}, MANAGER, 201, None, id="override"),
        pytest.param({"posting_date": day(2)}, CLERK, 201, None, id="inside-forward"),
        pytest.param({"posting_date": day(4)}, CLERK, 422, "SVC.TXN.FORWARD_DATE_EXCEEDED", id="too-far"),
        pytest.param(
            {"posting_date": day(4)}, MANAGER, 422, "SVC.TXN.FORWARD_DATE_EXCEEDED", id="no-forward-override"
        ),
        pytest.param({"memo": "m"}, CLERK, 422, "SVC.TXN.TRANSACTION_DATE_MISSING", id="missing"),
        pytest.param({"posting_date": None}, MANAGER, 422, "SVC.TXN.TRANSACTION_DATE_MISSING", id="null"),
    ],
)
async def test_create(
    srv: Running, body: dict[str, Any], who: dict[str, str], status: int, code: str | None
) -> None:
    got, answer = await call(srv, "POST", "posting", body, headers=who)
    assert got == status, answer
    if code is not None:
        assert answer["code"] == code and answer["type"] == f"urn:dap:error:{code}"
        assert answer["errors"][0]["path"] == "posting_date"


async def test_the_refusal_names_the_limit_and_the_override(srv: Running) -> None:
    _, answer = await call(srv, "POST", "posting", {"posting_date": day(-30)}, headers=CLERK)
    assert f"use {day(-10)} or later" in answer["detail"]
    assert "sales.posting.backdate" in answer["detail"]


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        pytest.param({"memo": "edited"}, 200, None, id="date-untouched"),
        pytest.param({"posting_date": "same"}, 200, None, id="same-date-sent-again"),
        pytest.param({"posting_date": day(-20)}, 422, "SVC.TXN.BACKDATE_EXCEEDED", id="another-old-date"),
        pytest.param({"posting_date": None}, 422, "SVC.TXN.TRANSACTION_DATE_MISSING", id="cleared"),
        pytest.param({"posting_date": day(0)}, 200, None, id="moved-into-the-window"),
    ],
)
async def test_update_checks_only_a_changed_date(
    srv: Running, change: dict[str, Any], status: int, code: str | None
) -> None:
    old = day(-30)
    posting = await new(srv, "posting", {"posting_date": old, "memo": "m"}, headers=MANAGER)
    body = {k: old if v == "same" else v for k, v in change.items()}
    got, answer = await call(srv, "PATCH", f"posting/{posting['id']}", body, headers=CLERK)
    assert got == status, answer
    if code is not None:
        assert answer["code"] == code
        _, now = await call(srv, "GET", f"posting/{posting['id']}")
        assert now["data"]["posting_date"] == old and now["data"]["version"] == posting["version"]


async def test_a_datetime_date_field_and_a_master_entity_without_it(srv: Running) -> None:
    status, answer = await call(srv, "POST", "journal", {"memo": "no date"}, headers=CLERK)
    assert status == 201, answer
    now = dt.datetime.now(dt.UTC)
    status, answer = await call(srv, "POST", "journal", {"booked_at": now.isoformat()}, headers=CLERK)
    assert status == 201, answer
    old = (now - dt.timedelta(days=5)).isoformat()
    status, answer = await call(srv, "POST", "journal", {"booked_at": old}, headers=MANAGER)
    assert status == 422 and answer["code"] == "SVC.TXN.BACKDATE_EXCEEDED", answer  # no override declared
