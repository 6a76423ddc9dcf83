"""dap.server.catalog — the loaded spec as the server sees it, compiled once per spec.

A :class:`Catalog` holds the entities, their tables, the REST resources each opts into, the UI
kinds, and what every write will need compiled in advance: derivation plans (``plans``), the
resolved Role catalogue (``grants``) and the manifest expressions and rules (``checking``). It is
immutable; the app holds it behind ``state.SpecHolder`` and the resource pod swaps it whole.

It sits above storage (tables and value converters come from there) and below everything that
reads a request, so access, documents and web all name ``Catalog`` and ``Resource`` from here::

    resources  Catalog, Resource, Slot, Referrer, and building them from a loaded spec
    plans      derivation plans of each entity (computed order, auto_fill sources, conditions)
    grants     the Role catalogue resolved to permission patterns, with a decision cache
    checking   manifest expressions and field rules, compiled and evaluated (pure)
    machines   the ``state`` field of a state machine; custom actions and transitions compiled
"""

from __future__ import annotations

from dap.server.catalog import checking, grants, machines, plans
from dap.server.catalog.resources import Catalog, Presented, Referrer, RelationSlot, Resource, Slot

__all__ = [
    "Catalog",
    "Presented",
    "Referrer",
    "RelationSlot",
    "Resource",
    "Slot",
    "checking",
    "grants",
    "machines",
    "plans",
]
