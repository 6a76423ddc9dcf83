"""Apps offering and consuming each other's services (``interfaces``, ``consumes``): both sides are
checked when the spec loads, each problem naming file and JSON path."""

from __future__ import annotations

import pytest

from dap.config import offers

from .test_validation import load, problems_of

SERVICE = """
apiVersion: dap.io/v1
kind: Service
metadata: {name: ordering, module: shop}
spec:
  actions:
    - {name: place}
    - {name: quote}
    - {name: cancel}
"""


def app(name: str, body: str) -> str:
    return f"apiVersion: dap.io/v1\nkind: App\nmetadata: {{name: {name}, module: shop}}\nspec:\n{body}\n"


OWNER = app("back", "  interfaces:\n    - {service: ordering, actions: [place, quote]}")
PAGE = """
apiVersion: dap.io/v1
kind: Page
metadata: {name: portal_home, module: shop}
spec:
  context:
    - {name: quote, source: api, call: shop.ordering.quote}
"""


def test_a_consuming_app_loads_and_its_ask_is_resolved() -> None:
    spec = load(
        SERVICE,
        OWNER,
        app(
            "portal",
            "  pages: [portal_home]\n  consumes:\n    - {app: back, service: ordering, actions: [quote]}",
        ),
        PAGE,
    )
    apps = {k: a.spec for k, a in spec.apps.items()}
    actions = {"shop/ordering": ["place", "quote", "cancel"]}
    assert offers.offers(apps, actions)["shop/ordering"] == offers.Offer(
        "shop/back", "shop/ordering", ("place", "quote")
    )
    assert list(offers.asks(apps, offers.offers(apps, actions))) == [
        offers.Ask("shop/portal", "shop/back", "shop/ordering", ("quote",))
    ]


def test_an_empty_consume_asks_everything_offered() -> None:
    spec = load(SERVICE, OWNER, app("portal", "  consumes:\n    - {app: back, service: ordering}"))
    apps = {k: a.spec for k, a in spec.apps.items()}
    [ask] = offers.asks(apps, offers.offers(apps, {"shop/ordering": ["place", "quote", "cancel"]}))
    assert ask.actions == ("place", "quote")


@pytest.mark.parametrize(
    ("documents", "path", "message"),
    [
        pytest.param(
            [app("back", "  interfaces:\n    - {service: nothing}")],
            "spec.interfaces[0].service",
            "'shop/nothing' is not declared",
            id="interface-unknown-service",
        ),
        pytest.param(
            [app("back", "  interfaces:\n    - {service: ordering, actions: [place, fly]}")],
            "spec.interfaces[0].actions[1]",
            "has no action 'fly'",
            id="interface-unknown-action",
        ),
        pytest.param(
            [OWNER, app("other", "  interfaces:\n    - {service: ordering}")],
            "spec.interfaces[0].service",
            "already offered by app 'shop/back'",
            id="interface-two-owners",
        ),
        pytest.param(
            [app("portal", "  consumes:\n    - {app: nobody, service: ordering}")],
            "spec.consumes[0].app",
            "app 'shop/nobody' is not declared",
            id="consume-unknown-app",
        ),
        pytest.param(
            [OWNER, app("portal", "  consumes:\n    - {app: portal, service: ordering}")],
            "spec.consumes[0].app",
            "does not consume its own",
            id="consume-itself",
        ),
        pytest.param(
            [
                app("back", "  title: Back"),
                app("portal", "  consumes:\n    - {app: back, service: ordering}"),
            ],
            "spec.consumes[0].service",
            "does not offer service 'shop/ordering'",
            id="consume-not-in-interfaces",
        ),
        pytest.param(
            [OWNER, app("portal", "  consumes:\n    - {app: back, service: ordering, actions: [cancel]}")],
            "spec.consumes[0].actions[0]",
            "does not offer 'cancel'",
            id="consume-action-not-offered",
        ),
        pytest.param(
            [OWNER, app("portal", "  pages: [portal_home]"), PAGE],
            "spec.context[0].call",
            "add {app: shop/back, service: shop/ordering, actions: [quote]} to the spec.consumes of app",
            id="page-calls-undeclared",
        ),
        pytest.param(
            [
                OWNER,
                app(
                    "portal",
                    "  pages: [portal_home]\n  consumes:\n"
                    "    - {app: back, service: ordering, actions: [place]}",
                ),
                PAGE,
            ],
            "spec.context[0].call",
            "calls 'quote' of 'shop/ordering'",
            id="page-calls-action-not-consumed",
        ),
    ],
)
def test_both_sides_are_checked(documents: list[str], path: str, message: str) -> None:
    problems = problems_of(SERVICE, *documents)
    matching = [p for p in problems if p.path == path and message in p.message]
    assert matching, f"expected {path}: ...{message}... in {[str(p) for p in problems]}"
    assert matching[0].file == "shop.yaml"


def test_the_owner_s_own_pages_and_unowned_services_need_no_consume() -> None:
    load(SERVICE, app("back", "  pages: [portal_home]\n  interfaces:\n    - {service: ordering}"), PAGE)
    load(SERVICE, app("portal", "  pages: [portal_home]"), PAGE)
