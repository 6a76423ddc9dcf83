"""Desired-versus-live comparison: the smallest JSON merge patch, or nothing at all.

Idempotency rests here. A resync of an unchanged workspace must make no write call, yet the API
server adds defaults everywhere (``imagePullPolicy``, ``timeoutSeconds``, ``clusterIP``,
``terminationMessagePath``…), so "equal" means "the live object already *contains* what we
want": extra keys on the live side are fine, missing or different ones are not.

- Mappings are compared key by key; only differing keys go into the patch.
- Lists are compared position by position with the same containment rule; if any element
  differs, the whole desired list is the patch (JSON merge patch replaces lists wholesale).
- ``None`` in the desired body means "must be absent" and becomes a deletion when present.
- For a few mappings the operator owns completely (``OWNED_MAPS``: node selector, ConfigMap and
  Secret data), keys that are live but not desired are deleted too.

``creatable`` turns a desired body into what is sent on create (the "must be absent" markers
removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OWNED_MAPS: frozenset[tuple[str, ...]] = frozenset(
    {
        ("spec", "template", "spec", "nodeSelector"),
        ("data",),
    }
)


def contains(live: Any, want: Any) -> bool:
    """Does the live value already satisfy the desired one (containment, see module doc)?"""
    if want is None:
        return live is None
    if isinstance(want, Mapping):
        if not isinstance(live, Mapping):
            return False
        return all(contains(live.get(key), value) for key, value in want.items())
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return False
        return all(contains(a, b) for a, b in zip(live, want, strict=True))
    return bool(live == want)


def patch_for(
    desired: Mapping[str, Any], live: Mapping[str, Any], path: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON merge patch that brings ``live`` to contain ``desired``; ``{}`` when it does."""
    patch: dict[str, Any] = {}
    for key, want in desired.items():
        have = live.get(key)
        here = (*path, key)
        if want is None:
            if have is not None:
                patch[key] = None
        elif isinstance(want, Mapping) and isinstance(have, Mapping):
            sub = patch_for(want, have, here)
            if sub:
                patch[key] = sub
        elif isinstance(want, Mapping) and not want and have is None:
            continue  # an empty mapping where there is none: nothing to write
        elif not contains(have, want):
            patch[key] = creatable(want)
    if path in OWNED_MAPS:
        for key in live:
            if key not in desired:
                patch[key] = None
    return patch


def creatable(value: Any) -> Any:
    """The value without its "must be absent" (``None``) markers, for a create or a replace."""
    if isinstance(value, Mapping):
        return {k: creatable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [creatable(v) for v in value]
    return value
