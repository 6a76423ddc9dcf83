"""Change freezes: what a snapshot deploys while a freeze holds. Pure.

A freeze (``dap control freeze set``) names a scope — an ``app``, a ``workspace`` or an
``environment`` — an end time and a reason. While it is active (not lifted, not past its end):

- registrations still happen and still land in the transparency log (a freeze holds deployment,
  not registration: the record of what was asked stays complete);
- each workspace it covers keeps the artifact it had when the freeze was set (its *hold*); a
  binding made during the freeze, with no hold, is not deployed until the freeze ends;
- a revocation overrides a hold: a held artifact that was revoked is not kept (the binding's
  current artifact, the revocation's fallback, is served instead), since revocation is a
  security action, not a change;
- pods keep serving: the snapshot keeps naming what they run.

When several freezes cover a workspace, the oldest one's hold wins. An environment freeze applies
to the controls serving that environment (``--environment`` of ``dap control serve``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dap.control import errors
from dap.control.trust import snapshots

SCOPES = ("app", "workspace", "environment")
DURATION = re.compile(r"(\d+)([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Freeze:
    freeze_id: str
    scope: str
    target: str
    reason: str
    created_at: datetime
    ends_at: datetime
    lifted_at: datetime | None = None

    def active(self, now: datetime) -> bool:
        return self.lifted_at is None and self.ends_at > now

    def covers(self, *, app: str, workspace: str, environment: str) -> bool:
        return (
            (self.scope == "app" and self.target == app)
            or (self.scope == "workspace" and self.target == workspace)
            or (self.scope == "environment" and self.target == environment)
        )

    def as_json(self, now: datetime) -> dict[str, object]:
        return {
            "freeze_id": self.freeze_id,
            "scope": self.scope,
            "target": self.target,
            "reason": self.reason,
            "created_at": snapshots.timestamp(self.created_at),
            "ends_at": snapshots.timestamp(self.ends_at),
            "lifted_at": snapshots.timestamp(self.lifted_at) if self.lifted_at else None,
            "active": self.active(now),
        }


@dataclass(frozen=True)
class Binding:
    """A deployment row with its current artifact (``None`` when it is not active)."""

    workspace_id: str
    app: str
    cluster_id: str | None
    artifact_id: str | None
    sha256: str | None


@dataclass(frozen=True)
class Hold:
    artifact_id: str
    sha256: str
    active: bool  # False once the held artifact was revoked


def desired(
    bindings: Iterable[Binding],
    freezes: Sequence[Freeze],
    holds: Mapping[tuple[str, str], Hold],
    *,
    environment: str,
    now: datetime,
) -> list[snapshots.Deployment]:
    """The deployments a snapshot names, freezes applied (``holds`` keyed by freeze id, workspace)."""
    active = sorted((f for f in freezes if f.active(now)), key=lambda f: (f.created_at, f.freeze_id))
    out: list[snapshots.Deployment] = []
    for b in bindings:
        covering = [
            f for f in active if f.covers(app=b.app, workspace=b.workspace_id, environment=environment)
        ]
        artifact, sha256 = b.artifact_id, b.sha256
        if covering:
            hold = holds.get((covering[0].freeze_id, b.workspace_id))
            if hold is None:
                artifact = sha256 = None  # bound during the freeze: deployed when it ends
            elif hold.active:
                artifact, sha256 = hold.artifact_id, hold.sha256
        if artifact is not None and sha256 is not None:
            out.append(
                snapshots.Deployment(
                    workspace_id=b.workspace_id, artifact_id=artifact, sha256=sha256, cluster_id=b.cluster_id
                )
            )
    return out


def check_scope(app: str | None, workspace: str | None, environment: str | None) -> tuple[str, str]:
    given = [(s, v) for s, v in zip(SCOPES, (app, workspace, environment), strict=True) if v]
    if len(given) != 1:
        raise errors.RequestError(
            "a freeze names exactly one scope: --app, --workspace or --environment",
            [errors.ErrorItem("scope", "exactly one of app, workspace, environment")],
        )
    return given[0]


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``1d``, or combined (``1h30m``)."""
    parts = DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise errors.RequestError(
            f"invalid duration {text!r}", [errors.ErrorItem("for", "like 90s, 30m, 2h, 1d or 1h30m")]
        )
    return timedelta(seconds=sum(int(n) * UNITS[u] for n, u in parts))


def ends_at(*, now: datetime, until: datetime | None, duration: str | None) -> datetime:
    if (until is None) == (duration is None):
        raise errors.RequestError(
            "a freeze needs an end: exactly one of --until TIME or --for DURATION",
            [errors.ErrorItem("ends_at", "one of until, for")],
        )
    end = until if until is not None else now + parse_duration(duration or "")
    if end.tzinfo is None:
        raise errors.RequestError("--until needs a time zone (e.g. 2026-12-01T18:00:00Z)")
    if end <= now:
        raise errors.RequestError(
            f"the freeze would end at {snapshots.timestamp(end)}, which is not in the future",
            [errors.ErrorItem("ends_at", "must be in the future")],
        )
    return end
