"""A small spec of documents and the records around them, shared by the lifecycle, reference and
audit tests (its own, so that changes to conftest's SHOP do not move these tests)."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Running

JSON = {"Content-Type": "application/json"}  # every JSON endpoint refuses other bodies (415)

DOCS = {
    "doc/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: doc}
spec: {title: Documents}
""",
    "doc/customer.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: customer, module: doc}
spec:
  fields:
    - {name: name, type: string, required: true}
    - {name: email, type: string, masked: true, audited: true}
    - {name: credit, type: money, scale: 2, audited: true}
    - {name: note, type: text}
    - {name: secret, type: string, audited: true, exclude: [rest]}
  actions:
    - {name: delete, audit: true}
  expose: [{type: rest}]
""",
    "doc/order.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: order, module: doc}
spec:
  lifecycle: true
  fields:
    - {name: number, type: string, required: true, unique: true}
    - {name: customer, type: relation, relation: {entity: doc/customer}}
    - {name: amended_from, type: relation, relation: {entity: doc/order, on_delete: set_null}}
    - {name: total, type: money, scale: 2}
    - name: lines
      type: child
      child:
        storage: table
        fields:
          - {name: item, type: string, required: true}
          - {name: ref, type: relation, relation: {entity: doc/order}}
  actions:
    - {name: create, audit: true}
    - {name: update, audit: true}
    - {name: submit, audit: true}
    - {name: cancel, audit: true}
    - {name: delete, audit: true}
  expose: [{type: rest}]
""",
    "doc/delivery.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: delivery, module: doc}
spec:
  lifecycle: true
  fields:
    - {name: order, type: relation, relation: {entity: doc/order, on_delete: cascade}}
  actions:
    - {name: delete, audit: true}
  expose: [{type: rest}]
""",
    "doc/note.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: note, module: doc}
spec:
  fields:
    - {name: order, type: relation, relation: {entity: doc/order, on_delete: set_null}}
    - {name: text, type: string}
  actions:
    - {name: update, audit: true}
  expose: [{type: rest}]
""",
    "doc/pin.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: pin, module: doc}
spec:
  fields:
    - {name: order, type: relation, relation: {entity: doc/order}}
  expose: [{type: rest}]
""",
    "doc/quote.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: quote, module: doc}
spec:
  lifecycle: true
  fields:
    - {name: title, type: string}
  expose: [{type: rest, actions: [list, create]}]
""",
    "doc/memo.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: memo, module: doc}
spec:
  lifecycle: true
  fields:
    - {name: title, type: string}
  actions:
    - {name: submit, disabled: true}
  expose: [{type: rest}]
""",
}

API = "/default/api/doc"


async def call(
    srv: Running,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    ws: str | None = None,
) -> tuple[int, Any]:
    """One request (``path`` below ``/default/api/doc`` unless it starts with ``/``)."""
    url = srv.api + (path if path.startswith("/") else f"{API}/{path}")
    data = json.dumps(body).encode() if body is not None else None
    async with srv.http.request(
        method, url, data=data, headers={**JSON, **srv.auth(ws), **(headers or {})}
    ) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text else None


async def new(srv: Running, entity: str, body: dict[str, Any], *, query: str = "") -> dict[str, Any]:
    status, answer = await call(srv, "POST", f"{entity}{query}", body)
    assert status == 201, answer
    data: dict[str, Any] = answer["data"]
    return data


async def move(srv: Running, entity: str, record_id: str, *actions: str) -> None:
    for action in actions:
        status, answer = await call(srv, "POST", f"{entity}/{record_id}/{action}")
        assert status == 200, answer
