"""Exponential backoff with a cap and jitter. Pure.

Used for an artifact that failed a step (retried on later cycles, so a transient fault heals by
itself without hammering the control plane) and for evidence that could not be sent. Jitter is
a parameter, not a hidden ``random()`` call, so tests choose it.

The cap is a ceiling of the delay *after* jitter, so a caller can rely on it: the pull loop
bounds an artifact's retries by its pull interval with :meth:`Backoff.within`, since a pod that
backs off longer than it polls converges later than one that merely polls (issue 17).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.1  # +/- this fraction of the delay

    def delay(self, failures: int, spread: float = 0.5) -> float:
        """Seconds to wait after ``failures`` consecutive failures (>= 1); ``spread`` in [0, 1]."""
        if failures < 1:
            return 0.0
        raw = min(self.cap, self.base * self.factor ** (failures - 1))
        return min(self.cap, max(0.0, raw * (1.0 + self.jitter * (2.0 * spread - 1.0))))

    def within(self, limit: float) -> Backoff:
        """This policy with no delay longer than ``limit`` seconds (base and cap lowered to it)."""
        return dataclasses.replace(self, base=min(self.base, limit), cap=min(self.cap, limit))
