"""Rules on what apps offer and use of each other (``interfaces``, ``consumes``; ``config.offers``).

Both sides are checked, so a grant request never names something that cannot be granted:

- an interface names a declared service and actions it has, and no other app offers the service;
- a consumption names a declared app other than its own, a service that app offers in its
  ``interfaces``, and only actions the offer holds;
- an app's pages (their ``source: api`` contexts, the only place a page calls a service) call
  another app's offered service only when the app declares that consumption, with the action.
  The problem is located at the page's call and names the app whose ``consumes`` lacks it.
"""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import offers
from dap.config.enums import ContextSource
from dap.config.errors import Problem
from dap.config.specs import Spec, qualify
from dap.config.validation import contexts, locating


def _service_actions(spec: Spec) -> dict[str, list[str]]:
    return {key: [a.name for a in s.spec.actions] for key, s in spec.services.items()}


def interface_rules(spec: Spec) -> Iterator[Problem]:
    """Interfaces name declared services and actions; one app offers a service."""
    owners: dict[str, str] = {}
    for key in sorted(spec.apps):
        app = spec.apps[key]
        module = app.metadata.module
        for i, interface in enumerate(app.spec.interfaces):
            path = f"spec.interfaces[{i}]"
            service_key = qualify(interface.service, module)
            service = spec.services.get(service_key)
            if service is None:
                yield from locating.undeclared(
                    spec,
                    app,
                    f"{path}.service",
                    "Service",
                    service_key,
                    f"service {service_key!r} is not declared; an app offers only declared services",
                )
                continue
            declared = {a.name for a in service.spec.actions}
            for j, action in enumerate(interface.actions):
                if action not in declared:
                    yield locating.at(
                        spec, app, f"{path}.actions[{j}]", f"service {service_key!r} has no action {action!r}"
                    )
            first = owners.setdefault(service_key, key)
            if first != key:
                yield locating.at(
                    spec,
                    app,
                    f"{path}.service",
                    f"service {service_key!r} is already offered by app {first!r}; one app owns a service",
                )


def consume_rules(spec: Spec) -> Iterator[Problem]:
    """Consumptions name another declared app, a service it offers and actions of the offer."""
    offered = offers.offers({k: a.spec for k, a in spec.apps.items()}, _service_actions(spec))
    for key in sorted(spec.apps):
        app = spec.apps[key]
        module = app.metadata.module
        for i, consume in enumerate(app.spec.consumes):
            path = f"spec.consumes[{i}]"
            owner = qualify(consume.app, module)
            service = qualify(consume.service, module)
            if owner == key:
                yield locating.at(spec, app, f"{path}.app", "an app does not consume its own services")
                continue
            if owner not in spec.apps:
                yield from locating.undeclared(
                    spec,
                    app,
                    f"{path}.app",
                    "App",
                    owner,
                    f"app {owner!r} is not declared (write module/name)",
                )
                continue
            offer = offered.get(service)
            if offer is None or offer.app != owner:
                yield locating.at(
                    spec,
                    app,
                    f"{path}.service",
                    f"app {owner!r} does not offer service {service!r}; it must list it in spec.interfaces",
                )
                continue
            for j, action in enumerate(consume.actions):
                if action not in offer.actions:
                    yield locating.at(
                        spec,
                        app,
                        f"{path}.actions[{j}]",
                        f"app {owner!r} does not offer {action!r} of {service!r}"
                        f" (it offers {', '.join(offer.actions)})",
                    )


def page_call_rules(spec: Spec) -> Iterator[Problem]:
    """An app's pages call another app's offered service only as the app's ``consumes`` say."""
    apps = {k: a.spec for k, a in spec.apps.items()}
    offered = offers.offers(apps, _service_actions(spec))
    if not offered:
        return
    for key in sorted(spec.apps):
        app = spec.apps[key]
        for ref in dict.fromkeys(app.spec.pages):
            page = spec.resolve(spec.pages, ref, app.metadata.module)
            if page is None:
                continue
            for i, decl in enumerate(page.spec.context):
                match = contexts.CALL.fullmatch(decl.call or "")
                if decl.source is not ContextSource.API or match is None:
                    continue
                service = qualify(f"{match[1]}/{match[2]}", page.metadata.module)
                offer = offered.get(service)
                if offer is None or offer.app == key:
                    continue
                asked = offers.consumed(app.spec, key, offer.app, service)
                if asked is None or (asked and match[3] not in asked):
                    yield locating.at(
                        spec,
                        page,
                        f"spec.context[{i}].call",
                        f"page {page.key!r} of app {key!r} calls {match[3]!r} of {service!r}, which app"
                        f" {offer.app!r} offers; add {{app: {offer.app}, service: {service},"
                        f" actions: [{match[3]}]}} to the spec.consumes of app {key!r}",
                    )
