"""Strict duration strings: ``300s``, ``1h``, ``1h30m``, ``250ms``, ``7d``.

A duration is one or more ``<integer><unit>`` parts, units ``d h m s ms``, each at most once and in
descending order. Anything else (spaces, decimals, a bare number, ``1m1h``) is refused, because a
manifest that says ``ttl: 5`` almost always meant something the reader cannot guess.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_ORDER = ("d", "h", "m", "s", "ms")
_PART = re.compile(r"(\d+)(ms|d|h|m|s)")
DURATION_PATTERN = r"^([0-9]+(ms|d|h|m|s))+$"


class DurationError(ValueError):
    """A duration string is malformed."""


def parse(text: str) -> timedelta:
    """Parse a duration string into a ``timedelta``; raise ``DurationError`` with a hint."""
    hint = "write it as digits followed by a unit (d, h, m, s, ms), e.g. 300s or 1h30m"
    if not isinstance(text, str) or not text:
        raise DurationError(f"empty duration; {hint}")
    position = 0
    last_rank = -1
    millis = 0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        unit = match.group(2)
        rank = _ORDER.index(unit)
        if rank <= last_rank:
            raise DurationError(f"duration {text!r} repeats or reorders units; {hint}")
        last_rank = rank
        millis += int(match.group(1)) * _UNITS[unit]
        position = match.end()
    if position != len(text):
        raise DurationError(f"invalid duration {text!r}; {hint}")
    return timedelta(milliseconds=millis)
