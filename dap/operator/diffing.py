"""Desired-versus-live comparison: the smallest JSON merge patch, or nothing at all.

Idempotency rests here. A resync of an unchanged workspace must make no write call, yet the API
server adds defaults everywhere (``imagePullPolicy``, ``timeoutSeconds``, ``clusterIP``,
``terminationMessagePath``…), so "equal" means "the live object already *contains* what we
want": extra keys on the live side are fine, missing or different ones are not.

- Mappings are compared key by key; only differing keys go into the patch.
- Lists are compared position by position with the same containment rule; if any element
  differs, the whole desired list is the patch (JSON merge patch replaces lists wholesale).
- ``None`` in the desired body means "must be absent" and becomes a deletion when present.
- Under a ``resources`` key, strings are compared as Kubernetes quantities: the API server
  stores ``0.5`` as ``500m`` and ``1024Mi`` as ``1Gi``, which are not differences.
- For a few mappings the operator owns completely (``OWNED_MAPS``: node selector, ConfigMap and
  Secret data), keys that are live but not desired are deleted too.

``creatable`` turns a desired body into what is sent on create (the "must be absent" markers
removed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

OWNED_MAPS: frozenset[tuple[str, ...]] = frozenset(
    {
        ("spec", "template", "spec", "nodeSelector"),
        ("data",),
    }
)


_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?")
_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity(text: object) -> Decimal | None:
    """The value of a Kubernetes quantity string (``500m``, ``1Gi``, ``1e3``), None if not one."""
    match = _QUANTITY.fullmatch(str(text).strip()) if isinstance(text, str | int) else None
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIXES[suffix]
    except (InvalidOperation, KeyError):
        return None


def contains(live: Any, want: Any, *, quantities: bool = False) -> bool:
    """Does the live value already satisfy the desired one (containment, see module doc)?"""
    if want is None:
        return live is None
    if isinstance(want, Mapping):
        if not isinstance(live, Mapping):
            return False
        return all(
            contains(live.get(key), value, quantities=quantities or key == "resources")
            for key, value in want.items()
        )
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return False
        return all(contains(a, b, quantities=quantities) for a, b in zip(live, want, strict=True))
    if live == want:
        return True
    if quantities:
        mine, theirs = quantity(want), quantity(live)
        return mine is not None and mine == theirs
    return False


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
        elif not contains(have, want, quantities="resources" in here):
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
