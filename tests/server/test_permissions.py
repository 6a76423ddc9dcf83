"""Roles and permissions over real HTTP: action and field ``required_permission``, disabled standard
actions, anonymous reads (``auth: {required: false}``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from .access_spec import ACCESS, ADMIN, as_, call, new
from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLERK = as_("carl", "clerk")
MANAGER = as_("mona", "manager")
NOBODY = as_("nina")  # no role at all
STRANGER = as_("sam", "unknown_role", "buyer")  # roles no Role manifest declares


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    async with running(pg_dsn, load(ACCESS)) as r:
        yield r


# --- action permissions ----------------------------------------------------------------------------


async def test_a_standard_action_redeclared_with_a_permission_needs_it(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Acme"})
    status, answer = await call(srv, "DELETE", f"customer/{customer['id']}", headers=CLERK)
    assert status == 403, answer
    assert answer["code"] == "SVC.AUTH.FORBIDDEN"
    assert "sales.customer.delete" in answer["detail"]
    status, _ = await call(srv, "GET", f"customer/{customer['id']}")
    assert status == 200  # refused, nothing deleted
    status, _ = await call(srv, "DELETE", f"customer/{customer['id']}", headers=as_("rita", "remover"))
    assert status == 204


async def test_actions_without_a_permission_stay_open_to_every_caller(srv: Running) -> None:
    status, answer = await call(srv, "POST", "customer", {"name": "Open"}, headers=NOBODY)
    assert status == 201, answer


async def test_submit_needs_its_permission(srv: Running) -> None:
    order = await new(srv, "order", {"number": "S-1", "buyer": "carl"}, headers=CLERK)
    status, answer = await call(srv, "POST", f"order/{order['id']}/submit", headers=CLERK)
    assert status == 403 and "sales.order.submit" in answer["detail"], answer
    status, answer = await call(srv, "POST", f"order/{order['id']}/submit", headers=MANAGER)
    assert status == 200 and answer["data"]["docstatus"] == "submitted", answer


async def test_create_and_submit_needs_the_submit_permission_too(srv: Running) -> None:
    status, answer = await call(srv, "POST", "order?submit=true", {"number": "S-2"}, headers=CLERK)
    assert status == 403 and "sales.order.submit" in answer["detail"], answer
    status, answer = await call(srv, "POST", "order?submit=true", {"number": "S-3"}, headers=MANAGER)
    assert status == 201 and answer["data"]["docstatus"] == "submitted", answer


async def test_a_custom_action_checks_its_permission_before_anything_else(srv: Running) -> None:
    order = await new(srv, "order", {"number": "S-4", "buyer": "carl"}, headers=CLERK)
    status, answer = await call(srv, "POST", f"order/{order['id']}/approve", headers=CLERK)
    assert status == 403 and "sales.order.approve" in answer["detail"], answer
    status, answer = await call(srv, "POST", f"order/{order['id']}/approve", headers=MANAGER)
    assert status == 501, answer  # allowed, but the bridge that runs it is not hosted
    status, answer = await call(srv, "POST", f"order/{order['id']}/remind", headers=CLERK)
    assert status == 501, answer  # no permission declared: open


async def test_undeclared_roles_grant_nothing(srv: Running) -> None:
    order = await new(srv, "order", {"number": "S-5", "buyer": "sam"}, headers=STRANGER)
    status, _ = await call(srv, "POST", f"order/{order['id']}/submit", headers=STRANGER)
    assert status == 403


async def test_a_disabled_standard_action_is_gone(srv: Running) -> None:
    memo = await new(srv, "memo", {"title": "x"})
    status, answer = await call(srv, "PATCH", f"memo/{memo['id']}", {"title": "y"})
    assert status == 405 and answer["code"] == "SVC.ACTION.NOT_EXPOSED", answer
    status, spec = await call(srv, "GET", "/default/api/openapi.json")
    assert "patch" not in spec["paths"]["/api/sales/memo/{id}"]


# --- field permissions ----------------------------------------------------------------------------


async def test_a_field_the_caller_may_not_read_is_absent_from_every_answer(srv: Running) -> None:
    status, answer = await call(
        srv, "POST", "customer", {"name": "Hidden", "credit": "10.00"}, headers=MANAGER
    )
    assert status == 201 and answer["data"]["credit"] == "10.00", answer
    cid = answer["data"]["id"]
    for path in (f"customer/{cid}", f"customer?id={cid}"):
        status, answer = await call(srv, "GET", path, headers=CLERK)
        assert status == 200, answer
        record = answer["data"] if isinstance(answer["data"], dict) else answer["data"][0]
        assert "credit" not in record and record["name"] == "Hidden"
        status, answer = await call(srv, "GET", path, headers=MANAGER)
        record = answer["data"] if isinstance(answer["data"], dict) else answer["data"][0]
        assert record["credit"] == "10.00"
    status, answer = await call(srv, "PATCH", f"customer/{cid}", {"note": "n"}, headers=CLERK)
    assert status == 200 and "credit" not in answer["data"], answer
    status, answer = await call(srv, "POST", "customer", {"name": "Other"}, headers=CLERK)
    assert status == 201 and "credit" not in answer["data"], answer


async def test_the_find_cache_never_serves_a_hidden_field(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Cached", "credit": "99.00"})
    for _ in range(2):  # the second read of each would come from the cache
        _, answer = await call(srv, "GET", f"customer/{customer['id']}", headers=MANAGER)
        assert answer["data"]["credit"] == "99.00"
        _, answer = await call(srv, "GET", f"customer/{customer['id']}", headers=CLERK)
        assert "credit" not in answer["data"], answer


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "customer", {"name": "X", "credit": "1.00"}, id="create"),
        pytest.param("PATCH", "customer/{id}", {"credit": "1.00"}, id="update"),
        pytest.param("GET", "customer?credit[gt]=0", None, id="filter"),
        pytest.param("GET", "customer?sort=-credit", None, id="sort"),
        pytest.param("GET", "customer?fields=name,credit", None, id="fields"),
    ],
)
async def test_writing_filtering_or_selecting_a_hidden_field_is_forbidden(
    srv: Running, method: str, path: str, body: dict[str, str] | None
) -> None:
    customer = await new(srv, "customer", {"name": "Base", "credit": "5.00"})
    status, answer = await call(srv, method, path.format(id=customer["id"]), body, headers=CLERK)
    assert status == 403, answer
    assert answer["code"] == "SVC.AUTH.FORBIDDEN"
    assert answer["errors"] == [
        {"path": "credit", "message": "needs the permission sales.customer.read_credit"}
    ]
    status, answer = await call(srv, method, path.format(id=customer["id"]), body, headers=MANAGER)
    assert status in (200, 201), answer
    _, answer = await call(srv, "GET", f"customer/{customer['id']}")
    assert answer["data"]["credit"] in ("5.00", "1.00")


# --- anonymous reads ----------------------------------------------------------------------------------


async def test_an_entity_with_auth_not_required_answers_anonymous_reads(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Public", "credit": "7.00"})
    status, answer = await call(srv, "GET", f"customer/{customer['id']}", headers=None)
    assert status == 200 and answer["data"]["name"] == "Public", answer
    assert "credit" not in answer["data"]  # anonymous callers hold no permission
    status, answer = await call(srv, "GET", "customer?name=Public", headers=None)
    assert status == 200 and [r["name"] for r in answer["data"]] == ["Public"], answer


async def test_anonymous_callers_never_write_and_a_bad_token_is_still_refused(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Guarded"})
    for method, path, body in (
        ("POST", "customer", {"name": "x"}),
        ("PATCH", f"customer/{customer['id']}", {"name": "y"}),
        ("DELETE", f"customer/{customer['id']}", None),
    ):
        status, answer = await call(srv, method, path, body, headers=None)
        assert status == 401, (method, answer)
    status, _ = await call(srv, "GET", "customer", headers={"Authorization": "Bearer nope"})
    assert status == 401


async def test_anonymous_filters_on_hidden_fields_are_refused_as_unauthenticated(srv: Running) -> None:
    status, answer = await call(srv, "GET", "customer?credit[gt]=0", headers=None)
    assert status == 401 and "credit" in answer["detail"], answer  # a token might hold the permission


@pytest.mark.parametrize("entity", ["memo", "order"])
async def test_entities_requiring_auth_refuse_anonymous_reads(srv: Running, entity: str) -> None:
    record = await new(srv, entity, {"title": "t"} if entity == "memo" else {"number": "A-1"})
    for path in (entity, f"{entity}/{record['id']}"):
        status, answer = await call(srv, "GET", path, headers=None)
        assert status == 401 and answer["code"] == "SVC.AUTH.UNAUTHENTICATED", answer


async def test_admin_holds_every_permission(srv: Running) -> None:
    customer = await new(srv, "customer", {"name": "Root", "credit": "1.00"})
    status, answer = await call(srv, "GET", f"customer/{customer['id']}", headers=ADMIN)
    assert status == 200 and answer["data"]["credit"] == "1.00"
    status, _ = await call(srv, "DELETE", f"customer/{customer['id']}", headers=ADMIN)
    assert status == 204
