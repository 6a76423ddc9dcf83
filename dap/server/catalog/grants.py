"""The Role catalogue of one spec, resolved once when the catalog is built; decisions cached. Pure.

The spec names ``required_permission`` (fields and actions) and ``override_permission``
(backdating) but leaves the catalogue open; ``dap.config.roles`` designs it as a ``Role`` manifest
kind granting permission patterns and including other roles. Here a catalog's roles are resolved
to their full pattern lists (includes followed, cycles impossible after validation but harmless
here), and :meth:`Grants.allows` answers "may a caller with these roles use this permission".

- The JWT ``roles`` claim names the caller's roles; a role no Role manifest declares grants
  nothing (a token from another application cannot widen anything here).
- ``admin`` is built in and holds every permission, including ``<module>.<entity>.all_rows``,
  the permission that lifts row scope (``dap.server.access.scoping``).
- Decisions are cached per distinct roles tuple and permission (bounded), because the same few
  role sets ask the same few permissions on every request and a glob match is a regex call.
- The anonymous caller (an entity declaring ``auth: {required: false}``) holds no role.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from dap.config import roles as config_roles
from dap.config.roles import RoleSpec

ADMIN: Final = config_roles.ADMIN_ROLE
MAX_DECISIONS: Final = 10_000


def resolve(declared: Mapping[str, RoleSpec]) -> dict[str, tuple[str, ...]]:
    """Each role's own patterns followed by those of every role it includes, transitively."""
    out: dict[str, tuple[str, ...]] = {}
    for name in declared:
        seen: list[str] = []
        stack = [name]
        while stack:
            current = stack.pop()
            if current in seen or current not in declared:
                continue
            seen.append(current)
            stack.extend(reversed(declared[current].includes))
        patterns: list[str] = []
        for role in seen:
            patterns += [p for p in declared[role].permissions if p not in patterns]
        out[name] = tuple(patterns)
    return out


@dataclass(frozen=True)
class Grants:
    """The resolved role → patterns table of one catalog, with its decision cache."""

    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    _decisions: dict[tuple[tuple[str, ...], str], bool] = field(
        default_factory=dict, compare=False, repr=False
    )
    # per-resource derived policies (``guards.policy``), built lazily once per catalog
    policies: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # granted accesses by (principal object, resource, action) (``guards.check``), bounded there
    accesses: dict[tuple[Any, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, declared: Mapping[str, RoleSpec]) -> Grants:
        return cls(MappingProxyType(resolve(declared)))

    def allows(self, roles: tuple[str, ...], permission: str) -> bool:
        """Whether any of ``roles`` grants ``permission`` (``admin`` grants all)."""
        if ADMIN in roles:
            return True
        key = (roles, permission)
        decision = self._decisions.get(key)
        if decision is None:
            decision = any(
                config_roles.matches(pattern, permission)
                for role in roles
                for pattern in self.patterns.get(role, ())
            )
            if len(self._decisions) >= MAX_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision
