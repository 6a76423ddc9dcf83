"""A small spec with roles, field and action permissions, row scope, create scope and backdate
policies, shared by the access tests (its own, so that conftest's SHOP stays as others use it)."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Running, token

JSON = {"Content-Type": "application/json"}  # every JSON endpoint refuses other bodies (415)

ACCESS = {
    "sales/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: sales}
spec: {title: Sales}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: [sales.order.create, sales.order.update]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: manager}
spec:
  includes: [clerk]
  permissions: ['sales.order.*', sales.customer.read_credit, sales.posting.backdate]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: auditor}
spec:
  permissions: ['*.all_rows']
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: remover}
spec:
  permissions: [sales.customer.delete]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: submitter}
spec:
  permissions: [sales.order.submit]
""",
    "sales/customer.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: customer, module: sales}
spec:
  fields:
    - {name: name, type: string, required: true}
    - {name: region, type: string}
    - {name: credit, type: money, scale: 2, required_permission: sales.customer.read_credit}
    - {name: note, type: string}
  actions:
    - {name: delete, required_permission: sales.customer.delete}
  auth: {required: false}
  cache: {ttl: 60s}
  expose: [{type: rest}]
""",
    "sales/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: sales}
spec:
  lifecycle: true
  fields:
    - {name: number, type: string, required: true}
    - {name: customer, type: relation, relation: {entity: sales/customer}}
    - {name: region, type: string}
    - {name: buyer, type: string}
    - {name: amount, type: money, scale: 2}
  actions:
    - {name: submit, required_permission: sales.order.submit}
    - {name: approve, required_permission: sales.order.approve}
    - {name: remind}
  assignments:
    - {dimension: buyer, field: buyer, principal_field: username}
  create_scope: {field: region, ref_field: customer, via: sales.customer, via_field: region}
  cache: {ttl: 60s}
  expose: [{type: rest}]
""",
    "sales/visit.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: visit, module: sales}
spec:
  fields:
    - {name: title, type: string}
    - {name: region, type: string}
    - {name: archived, type: boolean, default: false}
    - {name: rep, type: string}
  filters:
    - {field: region, from: session, attr: regions, op: in}
    - {field: title, label: Title}
  fixed_filters:
    - {field: archived, value: false}
    - {field: rep, from: route, param: rep}
  expose: [{type: rest}]
""",
    "sales/memo.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: memo, module: sales}
spec:
  fields:
    - {name: title, type: string}
  actions:
    - {name: update, disabled: true}
  auth: {required: true, strategies: [jwt]}
  expose: [{type: rest}]
""",
    "sales/posting.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: posting, module: sales}
spec:
  characteristic: transaction
  fields:
    - {name: memo, type: string}
    - {name: posting_date, type: date}
  backdate:
    max_days_back: 10
    max_days_forward: 3
    override_permission: sales.posting.backdate
  expose: [{type: rest}]
""",
    "sales/journal.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: journal, module: sales}
spec:
  fields:
    - {name: memo, type: string}
    - {name: booked_at, type: datetime}
  backdate: {max_days_back: 2, date_field: booked_at}
  expose: [{type: rest}]
""",
}

API = "/default/api/sales"


def as_(username: str, *roles: str, **claims: Any) -> dict[str, str]:
    """The Authorization header of ``username`` holding ``roles`` (sub is ``u-<username>``)."""
    bearer = token(sub=f"u-{username}", username=username, roles=list(roles), **claims)
    return {"Authorization": f"Bearer {bearer}"}


ADMIN = as_("root", "admin")


async def call(
    srv: Running, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = ADMIN
) -> tuple[int, Any]:
    """One request below ``/default/api/sales`` (``headers=None`` sends no Authorization)."""
    url = srv.api + (path if path.startswith("/") else f"{API}/{path}")
    data = json.dumps(body).encode() if body is not None else None
    async with srv.http.request(method, url, data=data, headers={**JSON, **(headers or {})}) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text else None


async def new(
    srv: Running, entity: str, body: dict[str, Any], *, headers: dict[str, str] = ADMIN
) -> dict[str, Any]:
    status, answer = await call(srv, "POST", entity, body, headers=headers)
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data
