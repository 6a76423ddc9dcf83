"""Who holds which permission: decisions on the caller's roles under the catalog's ``Grants``. Pure.

The Role catalogue itself is resolved once per spec with the catalog (``catalog.grants``); here
the request-time questions are answered: may this principal use this permission, and which
permission lifts an entity's row scope.
"""

from __future__ import annotations

from dap.server.access import auth
from dap.server.catalog import Catalog


def granted(catalog: Catalog, principal: auth.Principal, permission: str) -> bool:
    """Whether ``principal`` holds ``permission`` under ``catalog``'s roles."""
    return catalog.grants.allows(principal.roles, permission)


def all_rows(module: str, entity: str) -> str:
    """The permission that lifts an entity's row scope."""
    return f"{module}.{entity}.all_rows"
