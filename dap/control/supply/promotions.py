"""Promotion rules: an artifact reaches a ``to`` workspace only after it ran healthy in a ``from`` one.

A rule (``dap control policy promote``) names an app, its staging workspaces (``from``), its
production workspaces (``to``) and a soak time. For each ``to`` binding the snapshot names the
newest artifact of the app, no newer than the binding's own, that

- a ``from`` workspace reported as running (``deploy_status`` ``loaded`` or ``up_to_date``) at
  least ``after`` ago, and
- no ``from`` workspace reported as failing (``deploy_status`` ``failed``/``rolled_back``, or a
  ``violation`` naming it), and no ``from`` workspace was ``unhealthy`` during the soak time.

Times are the control's own (when it received each report, its database's clock), never the
``at`` a reporter sends: a report dated in the past cannot skip the soak, nor one dated ahead hold
it back. A ``to`` binding with no such artifact is left out of the snapshot: its pods keep serving
what they run. Pure; ``contents.snapshot_content`` gathers the evidence and a serving control re-checks
periodically, since time passing alone can promote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Rule:
    app: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    after: timedelta

    def as_json(self) -> dict[str, object]:
        return {
            "app": self.app,
            "from_workspaces": list(self.sources),
            "to_workspaces": list(self.targets),
            "after_seconds": int(self.after.total_seconds()),
        }


@dataclass(frozen=True)
class Record:
    """What the ``from`` workspaces reported about one artifact."""

    first_running: datetime | None
    failed: bool


@dataclass(frozen=True)
class Candidate:
    artifact_id: str
    version: int
    sha256: str


def promoted(
    candidates: Sequence[Candidate],
    records: Mapping[str, Record],
    unhealthy: Sequence[datetime],
    *,
    after: timedelta,
    now: datetime,
) -> Candidate | None:
    """The newest candidate that soaked ``after`` in staging without trouble, else ``None``."""
    for candidate in sorted(candidates, key=lambda c: c.version, reverse=True):
        record = records.get(candidate.artifact_id)
        if record is None or record.failed or record.first_running is None:
            continue
        if now - record.first_running < after:
            continue
        if any(record.first_running <= moment <= record.first_running + after for moment in unhealthy):
            continue
        return candidate
    return None
