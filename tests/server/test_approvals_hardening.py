"""The outside probe's approval cases (issue 26): the inbox reads fields like a read does, and a
vote or an inbox query with text Postgres cannot store is a 4xx problem, never a 500."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dap import config

from .conftest import Running, load, running, token

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = {
    "hr/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: hr}
spec: {title: HR}
""",
    "hr/roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: committee}
spec:
  permissions: [hr.raise.find]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: payroll}
spec:
  permissions: [hr.raise.see_salary]
""",
    "hr/raise.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: raise, module: hr}
spec:
  fields:
    - {name: title, type: string, required: true}
    - {name: salary, type: string, required_permission: hr.raise.see_salary}
  actions:
    - {name: grant}
  state_machine:
    states: [asked, granted]
    initial: asked
    transitions:
      - name: grant
        from: asked
        to: granted
        action: grant
        approval:
          steps:
            - {name: committee, approvers: 2, roles: [committee], display_fields: [title, salary]}
  expose: [{type: rest}]
""",
}
JSON = {"Content-Type": "application/json"}


def who(name: str, *roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub=f'u-{name}', username=name, roles=list(roles))}"}


REQUESTER = who("rita", "admin")
ANN = who("ann", "committee")  # votes, may not read the salary
PAT = who("pat", "committee", "payroll")  # votes and may read it


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str) -> AsyncIterator[Running]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the spec's own warning is asserted below
        catalog = load(SPEC)
    async with running(pg_dsn, catalog) as r:
        await r.register("default")
        yield r


async def call(
    srv: Running, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, Any]:
    url = f"{srv.api}/default/api/{path}"
    async with srv.http.request(method, url, data=body, headers={**headers, **JSON}) as resp:
        assert resp.status < 500, await resp.text()
        return resp.status, await resp.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def approval(srv: Running) -> dict[str, Any]:
    status, answer = await call(
        srv, "POST", "hr/raise", REQUESTER, b'{"title": "raise for jo", "salary": "TOPSECRET 99000"}'
    )
    assert status == 201, answer
    status, answer = await call(srv, "POST", f"hr/raise/{answer['data']['id']}/grant", REQUESTER)
    assert status == 202, answer
    return answer["approval"]  # type: ignore[no-any-return]


async def test_the_inbox_hides_a_display_field_the_voter_may_not_read(
    srv: Running, approval: dict[str, Any]
) -> None:
    status, answer = await call(srv, "GET", "_approvals", ANN)
    assert status == 200, answer
    assert [a["display"] for a in answer["data"]] == [{"title": "raise for jo"}]
    assert "TOPSECRET" not in str(answer)
    status, answer = await call(srv, "GET", f"hr/raise/{approval['record_id']}", ANN)
    assert status == 200 and "salary" not in answer["data"]  # as a read shows it
    status, answer = await call(srv, "GET", "_approvals", PAT)
    assert [a["display"] for a in answer["data"]] == [{"title": "raise for jo", "salary": "TOPSECRET 99000"}]


async def test_validate_warns_of_a_display_field_behind_a_permission() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = config.load_files(dict(SPEC))
    said = [str(w) for w in spec.warnings]
    assert any("'salary'" in w and "hr.raise.see_salary" in w for w in said), said


@pytest.mark.parametrize(
    "comment",
    [
        pytest.param(b'{"comment": "a\\u0000b"}', id="nul"),
        pytest.param(b'{"comment": "a\\ud800b"}', id="lone-surrogate"),
    ],
)
@pytest.mark.parametrize("verb", ["approve", "reject"])
async def test_a_comment_postgres_cannot_store_is_422(
    srv: Running, approval: dict[str, Any], verb: str, comment: bytes
) -> None:
    status, answer = await call(srv, "POST", f"_approvals/{approval['id']}/{verb}", ANN, comment)
    assert status == 422, answer
    assert answer["errors"][0]["path"] == "comment"
    status, answer = await call(srv, "GET", f"_approvals/{approval['id']}", ANN)
    assert answer["data"]["votes"] == []  # nothing was counted


@pytest.mark.parametrize("entity", ["%00", "%ED%A0%80", "hr/nope", "hr%2Fraise%00"])
async def test_an_inbox_filter_naming_no_entity_is_404(srv: Running, entity: str) -> None:
    status, answer = await call(srv, "GET", f"_approvals?entity={entity}", ANN)
    assert (status, answer["code"]) == (404, "SVC.ENTITY.NOT_FOUND"), answer
    status, answer = await call(srv, "GET", "_approvals?entity=hr/raise", ANN)
    assert status == 200 and len(answer["data"]) == 1
