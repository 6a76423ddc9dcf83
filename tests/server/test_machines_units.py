"""The pure rules of state machines: which action requests which move, and from where. No server."""

from __future__ import annotations

import pytest

from dap import config
from dap.server import errors
from dap.server.catalog import Catalog, machines
from dap.server.workflows import machines as rules

from .test_workflows import WF


@pytest.fixture(scope="module")
def plans() -> dict[str, machines.ActionPlan]:
    catalog = Catalog.from_spec(config.load_files(dict(WF)))
    resource = catalog.resource("wf", "ticket")
    assert resource is not None
    return dict(resource.workflow)


@pytest.mark.parametrize(
    ("action", "state", "reached"),
    [
        pytest.param("start", "new", "open", id="start-from-new"),
        pytest.param("start", None, "open", id="no-state-counts-as-initial"),
        pytest.param("close", "new", "closed", id="close-from-new"),
        pytest.param("close", "open", "closed", id="close-from-open"),
        pytest.param("reopen", "closed", "open", id="transition-without-action"),
    ],
)
def test_allowed_moves(
    plans: dict[str, machines.ActionPlan], action: str, state: str | None, reached: str
) -> None:
    move = plans[action].move
    assert move is not None
    assert rules.check(action, move, state, plans) == reached


@pytest.mark.parametrize(
    ("action", "state"),
    [
        pytest.param("start", "open", id="start-twice"),
        pytest.param("close", "closed", id="close-twice"),
        pytest.param("reopen", "new", id="reopen-from-new"),
    ],
)
def test_refused_moves_say_where_they_run_from(
    plans: dict[str, machines.ActionPlan], action: str, state: str
) -> None:
    move = plans[action].move
    assert move is not None
    with pytest.raises(errors.Conflict) as caught:
        rules.check(action, move, state, plans)
    assert caught.value.code == rules.NOT_ALLOWED
    assert all(repr(o) in str(caught.value) for o in move.origins)
    assert all(a in str(caught.value) for a in machines.allowed_from(plans, state))


def test_plans_carry_params_and_conditions(plans: dict[str, machines.ActionPlan]) -> None:
    assert set(plans["close"].params) == {"reason", "minutes"}
    assert len(plans["close"].conditions.conditions["close"]) == 2
    assert plans["ping"].move is None and plans["ping"].declared is not None
    assert "submit" not in plans and "update" not in plans
