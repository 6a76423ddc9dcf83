"""A spec exposed over REST, gRPC and the websocket, and the callers' tokens, for the protocol tests;
the client per protocol that speaks its verbs is in ``protocols_clients``."""

from __future__ import annotations

from typing import Any

from .conftest import token

SPEC = {
    "sales/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: sales}
spec:
  title: Sales
  api: {grpc: {enabled: true, package: acme.sales.v1}}
""",
    "roles.yaml": """
apiVersion: dap.io/v1
kind: Role
metadata: {name: clerk}
spec:
  permissions: [sales.order.create]
---
apiVersion: dap.io/v1
kind: Role
metadata: {name: manager}
spec:
  includes: [clerk]
  permissions: ['sales.order.*', sales.customer.read_credit, sales.customer.bump, sales.tools.quote]
""",
    "sales/customer.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: customer, module: sales}
spec:
  fields:
    - {name: name, type: string, required: true}
    - {name: credit, type: money, scale: 2, required_permission: sales.customer.read_credit}
    - {name: visits, type: integer}
    - {name: vip, type: boolean}
    - {name: tags, type: string, multiple: true}
  actions:
    - name: bump
      required_permission: sales.customer.bump
      idempotent: true
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: text, type: string, required: true}
          - {name: times, type: integer}
    - name: recount
      call: async
      track: true
      idempotent: true
      required_permission: sales.customer.bump
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: text, type: string, required: true}
    - {name: rest_only, expose: [rest], impl: {type: native, handler: ops-test-echo}}
    - {name: wire_only, expose: [grpc, ws], impl: {type: native, handler: ops-test-echo}}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
""",
    "sales/tools.yaml": """
apiVersion: dap.io/v1
kind: Service
metadata: {name: tools, module: sales}
spec:
  expose: [{type: rest}, {type: grpc}, {type: ws}]
  actions:
    - name: quote
      required_permission: sales.tools.quote
      idempotent: true
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: text, type: string, required: true}
          - {name: times, type: integer}
    - name: batch
      call: async
      track: true
      idempotent: true
      callback: {channel: webhook, header: X-Reply-To}
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: text, type: string, required: true}
    - {name: hello, public: true, expose: [rest, grpc], impl: {type: native, handler: ops-test-echo}}
    - name: limited
      impl: {type: native, handler: ops-test-echo}
      rate_limit: {requests: 2, per: 60s, key: principal}
    - {name: rest_only, expose: [rest], impl: {type: native, handler: ops-test-echo}}
    - {name: wire_only, expose: [grpc, ws], impl: {type: native, handler: ops-test-echo}}
""",
    "sales/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: sales}
spec:
  lifecycle: true
  fields:
    - {name: number, type: string, required: true}
    - {name: buyer, type: string}
    - {name: amount, type: money, scale: 2}
  actions:
    - {name: create, required_permission: sales.order.create}
    - {name: update, required_permission: sales.order.update}
    - {name: delete, required_permission: sales.order.delete}
    - {name: submit, required_permission: sales.order.submit}
  assignments:
    - {dimension: buyer, field: buyer, principal_field: username}
  expose: [{type: rest}, {type: grpc}, {type: ws}]
""",
    "sales/memo.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: memo, module: sales}
spec:
  fields:
    - {name: title, type: string}
  expose: [{type: rest}]
""",
    "sales/ticket.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: ticket, module: sales}
spec:
  fields:
    - {name: title, type: string}
  expose: [{type: grpc, actions: [find, create]}]
""",
}

PACKAGE = "acme.sales.v1"
Outcome = tuple[str, Any]


def bearer(username: str, *roles: str) -> str:
    return f"Bearer {token(sub=f'u-{username}', username=username, roles=list(roles))}"
