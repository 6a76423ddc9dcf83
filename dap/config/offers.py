"""What apps offer each other (``AppInterface``) and ask of each other (``AppConsume``). Pure.

The spec gives the two records and says a consumption "triggers a grant request to the owning
app"; who owns a service is designed here (docs/decisions.md, issue 47):

- A service listed in an app's ``interfaces`` is **owned** by that app; at most one app may offer
  a service (validation refuses a second). The interface's ``actions`` are what it offers (empty:
  every action of the service).
- A service that no app offers belongs to no app: any app's pages may call it, as before.
- An app ``consumes`` ``{app, service, actions}``: it asks the owner for those actions (empty:
  everything the owner offers). :func:`asks` resolves that to the exact action names a grant
  request carries.

References are ``module/name`` or ``name`` within the app's own module, as elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from dap.config.apps import AppSpec
from dap.config.specs import qualify


@dataclass(frozen=True)
class Offer:
    """Service ``service`` offered by app ``app``: ``actions`` (resolved; every action when the
    interface names none)."""

    app: str
    service: str
    actions: tuple[str, ...]


@dataclass(frozen=True)
class Ask:
    """App ``consumer`` asks app ``owner`` for ``actions`` of ``service`` (resolved)."""

    consumer: str
    owner: str
    service: str
    actions: tuple[str, ...]


def module_of(key: str) -> str:
    return key.partition("/")[0]


def offers(apps: Mapping[str, AppSpec], service_actions: Mapping[str, Sequence[str]]) -> dict[str, Offer]:
    """Every offered service by key, with its owner; the first app (by key) wins a service two
    apps offer (validation refuses that). ``service_actions`` gives each declared service's
    action names; an interface naming an undeclared service is left out."""
    out: dict[str, Offer] = {}
    for key in sorted(apps):
        for interface in apps[key].interfaces:
            service = qualify(interface.service, module_of(key))
            declared = service_actions.get(service)
            if declared is None or service in out:
                continue
            offered = tuple(a for a in interface.actions if a in declared) or tuple(declared)
            out[service] = Offer(key, service, offered)
    return out


def asks(apps: Mapping[str, AppSpec], offered: Mapping[str, Offer]) -> Iterator[Ask]:
    """Every consumption that names a service another app offers (``offered``, by :func:`offers`),
    resolved to the actions asked (those of the consume that the owner offers; everything offered
    when it names none)."""
    for key in sorted(apps):
        for consume in apps[key].consumes:
            owner = qualify(consume.app, module_of(key))
            service = qualify(consume.service, module_of(key))
            offer = offered.get(service)
            if offer is None or offer.app != owner or owner == key:
                continue
            wanted = tuple(a for a in consume.actions if a in offer.actions) or offer.actions
            yield Ask(key, owner, service, wanted)


def consumed(app: AppSpec, app_key: str, owner: str, service: str) -> tuple[str, ...] | None:
    """The actions ``app`` declares it consumes of ``owner``'s ``service`` (``()``: all offered),
    or ``None`` when it declares no such consumption."""
    for consume in app.consumes:
        if (
            qualify(consume.app, module_of(app_key)) == owner
            and qualify(consume.service, module_of(app_key)) == service
        ):
            return consume.actions
    return None
