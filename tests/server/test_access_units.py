"""The pure halves of access control, without a server: role resolution, row-scope binding and
evaluation, the SQL it adds, and the backdate policy with ``today`` passed in."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from dap.config.enums import FilterOp
from dap.config.roles import RoleSpec
from dap.server.access import scoping, txdates
from dap.server.catalog import Catalog
from dap.server.catalog import grants as role_grants
from dap.server.storage import sql

from .access_spec import ACCESS
from .conftest import load

TENANT = uuid.UUID(int=1)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load(ACCESS)


def identity(**kw: object) -> scoping.Identity:
    values: dict[str, object] = {
        "username": "carl",
        "principal_id": "u-carl",
        "workspace": "default",
        "attrs": {},
    }
    values.update(kw)
    return scoping.Identity(**values)  # type: ignore[arg-type]


# --- pure: the role catalogue --------------------------------------------------------------------


def test_includes_are_followed_transitively_and_cycles_end() -> None:
    resolved = role_grants.resolve(
        {
            "a": RoleSpec(permissions=("x.a",), includes=("b",)),
            "b": RoleSpec(permissions=("x.b",), includes=("c",)),
            "c": RoleSpec(permissions=("x.*",), includes=("a",)),  # a cycle (validation refuses it)
        }
    )
    assert resolved["a"] == ("x.a", "x.b", "x.*")
    assert resolved["c"] == ("x.*", "x.a", "x.b")


def test_grants_decide_by_pattern_and_admin_holds_everything() -> None:
    grants = role_grants.Grants.of({"clerk": RoleSpec(permissions=("sales.order.*",))})
    assert grants.allows(("clerk",), "sales.order.create")
    assert not grants.allows(("clerk",), "sales.customer.create")
    assert not grants.allows(("ghost",), "sales.order.create")
    assert not grants.allows((), "sales.order.create")
    assert grants.allows(("admin",), "anything.at.all")
    assert grants.allows(("ghost", "clerk"), "sales.order.create")  # any role of the caller


# --- row scope -------------------------------------------------------------------------------------


def test_rules_are_assignments_session_filters_and_literal_fixed_filters(catalog: Catalog) -> None:
    order = catalog.resources["sales/order"]
    assert scoping.rules(order.spec) == (
        scoping.Rule("buyer", FilterOp.EQ, scoping.Source.ASSIGNMENT, attr="username"),
    )
    visit = catalog.resources["sales/visit"]
    assert scoping.rules(visit.spec) == (  # the plain filter and the route-sourced one are not scope
        scoping.Rule("region", FilterOp.IN, scoping.Source.SESSION, attr="regions"),
        scoping.Rule("archived", FilterOp.EQ, scoping.Source.CONSTANT, value="false"),
    )


def test_an_identity_value_binds_and_a_missing_one_matches_nothing(catalog: Catalog) -> None:
    order = catalog.resources["sales/order"]
    rules = scoping.rules(order.spec)
    (bound,) = scoping.bind(rules, order, identity())
    assert (bound.column, bound.op, bound.values, bound.single) == ("buyer", FilterOp.IN, ("carl",), "carl")
    (empty,) = scoping.bind(rules, order, identity(username=""))
    assert empty.nothing and empty.single is None


def test_a_list_valued_attribute_means_one_of(catalog: Catalog) -> None:
    visit = catalog.resources["sales/visit"]
    region, archived = scoping.bind(scoping.rules(visit.spec), visit, identity(attrs={"regions": ["n", "s"]}))
    assert (region.op, region.values, region.single) == (FilterOp.IN, ("n", "s"), None)
    assert (archived.op, archived.values) == (FilterOp.IN, (False,))
    region, _ = scoping.bind(scoping.rules(visit.spec), visit, identity(attrs={"regions": "n"}))
    assert region.values == ("n",)
    region, _ = scoping.bind(scoping.rules(visit.spec), visit, identity(attrs={"regions": [{"x": 1}]}))
    assert region.nothing  # values that are not scalars never match


def test_scope_becomes_part_of_the_statement(catalog: Catalog) -> None:
    order = catalog.resources["sales/order"]
    bound = scoping.bind(scoping.rules(order.spec), order, identity())
    statement, args = sql.select_one(order.table, TENANT, uuid.UUID(int=2), scope=scoping.conditions(bound))
    # one value is an equality (a B-tree reads it in order, storage.indexing); more are = ANY
    assert statement.endswith('WHERE tenant_id = $1 AND id = $2 AND "buyer" = $3')
    assert args == [TENANT, uuid.UUID(int=2), "carl"]
    statement, args = sql.select_one(order.table, TENANT, uuid.UUID(int=2))
    assert statement.endswith("WHERE tenant_id = $1 AND id = $2") and len(args) == 2


def _bound(op: FilterOp, *values: object) -> scoping.Bound:
    return scoping.Bound("f", "f", op, values, scoping.Rule("f", op, scoping.Source.SESSION, attr="a"))


@pytest.mark.parametrize(
    ("bound", "value", "expected"),
    [
        pytest.param(_bound(FilterOp.IN, "a", "b"), "b", True, id="in"),
        pytest.param(_bound(FilterOp.IN, "a"), None, False, id="null-never-in"),
        pytest.param(_bound(FilterOp.IN), "a", False, id="nothing"),
        pytest.param(_bound(FilterOp.NIN, "a"), "b", True, id="nin"),
        pytest.param(_bound(FilterOp.NIN, "a"), None, False, id="null-never-nin"),
        pytest.param(_bound(FilterOp.GTE, 3), 3, True, id="gte"),
        pytest.param(_bound(FilterOp.LT, 3), 3, False, id="lt"),
        pytest.param(_bound(FilterOp.LT, 3), "x", False, id="type-mismatch"),
        pytest.param(_bound(FilterOp.LIKE, "ab%"), "abc", True, id="like"),
        pytest.param(_bound(FilterOp.LIKE, "a_c"), "ABC", False, id="like-case"),
        pytest.param(_bound(FilterOp.ILIKE, "a_c"), "ABC", True, id="ilike"),
        pytest.param(_bound(FilterOp.BETWEEN, 1, 5), 5, True, id="between"),
        pytest.param(_bound(FilterOp.NULL), None, True, id="null"),
        pytest.param(_bound(FilterOp.NOTNULL), None, False, id="notnull"),
    ],
)
def test_admits_means_what_sql_means(bound: scoping.Bound, value: object, expected: bool) -> None:
    assert scoping.admits(bound, value) is expected


def test_refusals_judge_only_the_fields_written() -> None:
    bound = (_bound(FilterOp.IN, "carl"),)
    assert scoping.refusals(bound, {"other": 1}) == []
    assert scoping.refusals(bound, {"f": "carl"}) == []
    assert scoping.refusals(bound, {"f": "bob"}) == [("f", "must be carl (your a)")]
    assert scoping.refusals(bound, {"f": None}) == [("f", "must be carl (your a)")]


# --- backdate policy ----------------------------------------------------------------------------------

TODAY = dt.date(2024, 3, 15)


def _check(catalog: Catalog, entity: str, value: object, *, override: bool = False) -> str | None:
    refusal = txdates.check(catalog.entities[f"sales/{entity}"], value, today=TODAY, may_override=override)
    return refusal.code if refusal is not None else None


@pytest.mark.parametrize(
    ("value", "override", "code"),
    [
        pytest.param(TODAY, False, None, id="today"),
        pytest.param(dt.date(2024, 3, 5), False, None, id="oldest-allowed"),
        pytest.param(dt.date(2024, 3, 4), False, txdates.BACKDATE, id="one-day-too-old"),
        pytest.param(dt.date(2023, 1, 1), True, None, id="override-lifts-back"),
        pytest.param(dt.date(2024, 3, 18), False, None, id="latest-allowed"),
        pytest.param(dt.date(2024, 3, 19), False, txdates.FORWARD, id="one-day-too-far"),
        pytest.param(dt.date(2024, 3, 19), True, txdates.FORWARD, id="override-keeps-forward"),
        pytest.param(None, False, txdates.MISSING, id="transaction-needs-its-date"),
    ],
)
def test_posting_dates(catalog: Catalog, value: object, override: bool, code: str | None) -> None:
    assert _check(catalog, "posting", value, override=override) == code


def test_a_datetime_counts_by_its_utc_date_and_a_master_may_leave_it_out(catalog: Catalog) -> None:
    late_evening = dt.datetime(2024, 3, 12, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert _check(catalog, "journal", late_evening) is None  # 2024-03-13 in UTC: 2 days back
    early = dt.datetime(2024, 3, 13, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert _check(catalog, "journal", early) == txdates.BACKDATE  # 2024-03-12 in UTC
    assert _check(catalog, "journal", None) is None  # not a transaction entity


def test_the_refusal_says_what_to_do(catalog: Catalog) -> None:
    refusal = txdates.check(
        catalog.entities["sales/posting"], dt.date(2024, 1, 1), today=TODAY, may_override=False
    )
    assert refusal is not None and refusal.field == "posting_date"
    assert "2024-03-05 or later" in refusal.message and "sales.posting.backdate" in refusal.message


def test_a_granted_access_is_kept_per_principal_object_and_catalog(catalog: Catalog) -> None:
    from dap.server import errors
    from dap.server.access import auth, guards

    customer = catalog.resources["sales/customer"]
    clerk = auth.Principal(sub="u-1", username="carl", roles=("clerk",), workspace="default")
    manager = auth.Principal(sub="u-2", username="mia", roles=("manager",), workspace="default")
    first = guards.check(clerk, customer, "find")
    assert guards.check(clerk, customer, "find") is first  # kept
    assert "credit" in first.hidden
    # an equal principal that is another object (another token) derives its own
    twin = auth.Principal(sub="u-1", username="carl", roles=("clerk",), workspace="default")
    assert guards.check(twin, customer, "find") is not first
    seen = guards.check(manager, customer, "find")
    assert "credit" not in seen.hidden  # never another principal's view
    for _ in range(2):  # a refusal is never kept: it is raised every time
        with pytest.raises(errors.Forbidden):
            guards.check(clerk, customer, "delete")
    fresh = load(ACCESS)  # a new catalog starts with nothing kept
    assert guards.check(clerk, fresh.resources["sales/customer"], "find") is not first
