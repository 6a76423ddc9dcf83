"""A page's contexts (ContextDecl) are checked when the spec loads: names, what each source needs,
declared entities and service actions, expressions over the earlier contexts only."""

from __future__ import annotations

import textwrap

import pytest

from .test_validation import load, problems_of

SERVICE = """
apiVersion: dap.io/v1
kind: Service
metadata: {name: desk, module: shop}
spec:
  actions:
    - {name: stats}
"""


def page(context: str) -> str:
    body = textwrap.indent(textwrap.dedent(context).strip(), "    ")
    return (
        "apiVersion: dap.io/v1\nkind: Page\nmetadata: {name: home, module: shop}\n"
        f"spec:\n  title: Home\n  context:\n{body}\n"
    )


def test_a_page_with_every_source_loads() -> None:
    spec = load(
        SERVICE,
        page(
            """
            - {name: me, source: session, value: username}
            - {name: limit, source: const, value: 3}
            - {name: customer, source: entity, entity: customer, id: ":id", realtime: true, fallback: {}}
            - {name: customers, source: entity, entity: shop/customer, params: {region: north}}
            - {name: label, source: expr, expr: "concat(me, customer.title, route.id, session.username)"}
            - {name: stats, source: api, call: shop.desk.stats}
            """
        ),
    )
    assert [c.name for c in spec.pages["shop/home"].spec.context] == [
        "me",
        "limit",
        "customer",
        "customers",
        "label",
        "stats",
    ]


@pytest.mark.parametrize(
    ("context", "path", "message"),
    [
        ("- {name: Me, source: session}", "spec.context[0].name", "not an identifier"),
        (
            "- {name: a, source: const}\n- {name: a, source: const}",
            "spec.context[1].name",
            "declared twice",
        ),
        ("- {name: a, source: const, realtime: true}", "spec.context[0].realtime", "needs source: entity"),
        ("- {name: a, source: session, id: ':id'}", "spec.context[0].id", "belongs to source: entity"),
        ("- {name: a, source: entity}", "spec.context[0]", "needs an entity"),
        ("- {name: a, source: entity, entity: nothing}", "spec.context[0].entity", "not a declared entity"),
        ("- {name: a, source: expr}", "spec.context[0]", "needs an expr"),
        ("- {name: a, source: expr, expr: '1 +'}", "spec.context[0].expr", "invalid expression"),
        (
            "- {name: a, source: expr, expr: 'b + 1'}\n- {name: b, source: const, value: 1}",
            "spec.context[0].expr",
            "uses 'b', which is not a context declared before it",
        ),
        ("- {name: a, source: api}", "spec.context[0].call", "needs a call"),
        ("- {name: a, source: api, call: shop.nothing.stats}", "spec.context[0].call", "not declared"),
        ("- {name: a, source: api, call: shop.desk.other}", "spec.context[0].call", "has no action 'other'"),
    ],
)
def test_broken_contexts_are_refused_with_their_path(context: str, path: str, message: str) -> None:
    problems = problems_of(SERVICE, page(context))
    matching = [p for p in problems if p.path == path and message in p.message]
    assert matching, f"expected {path}: ...{message}... in {[str(p) for p in problems]}"
    assert matching[0].document == 4  # after the module, the customer and the service
