"""Snapshots: the signed desired state a cluster or resource pod pulls.

A snapshot is ``{version, issued_at, expires_at, environment, signing_key_id, signature,
deployments: [{workspace_id, artifact_id, sha256, cluster_id}]}``, signed like an envelope.

``version`` is bumped on every change of the desired deployments. A snapshot is also re-issued
(same version, new ``issued_at``/``expires_at``) once half its lifetime has passed, so that a pod
can tell a live control from a replayed old answer (freeze). The ETag therefore names both:
``"<version>.<issued_at unix seconds>"``; a re-issue changes it once per half-lifetime.

This module is pure: building, filtering, ETag matching. The HTTP layer keeps the current
``State`` in memory so that a matching ``If-None-Match`` is answered without the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict


class Deployment(TypedDict):
    workspace_id: str
    artifact_id: str
    sha256: str
    cluster_id: str | None


@dataclass(frozen=True)
class State:
    """The in-memory desired state behind every snapshot answer."""

    version: int
    issued_at: datetime
    ttl: timedelta
    environment: str
    deployments: tuple[Deployment, ...] = ()
    bodies: dict[tuple[str | None, str | None], bytes] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def expires_at(self) -> datetime:
        return self.issued_at + self.ttl

    @property
    def etag(self) -> str:
        return etag(self.version, self.issued_at)

    def needs_reissue(self, now: datetime) -> bool:
        return now >= self.issued_at + self.ttl / 2


def timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with seconds precision, the one timestamp form of signed documents."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def etag(version: int, issued_at: datetime) -> str:
    return f'"{version}.{int(issued_at.timestamp())}"'


def etag_matches(if_none_match: str | None, current: str) -> bool:
    """RFC 9110 weak comparison of an ``If-None-Match`` list against ``current``."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*":
            return True
        tag = tag.removeprefix("W/")
        if tag == current:
            return True
    return False


def select(
    deployments: Iterable[Deployment], *, workspace: str | None = None, cluster: str | None = None
) -> list[Deployment]:
    return [
        d
        for d in deployments
        if (workspace is None or d["workspace_id"] == workspace)
        and (cluster is None or d["cluster_id"] == cluster)
    ]


def document(state: State, deployments: Sequence[Deployment]) -> dict[str, Any]:
    """The unsigned snapshot document for ``deployments`` (already selected)."""
    return {
        "version": state.version,
        "issued_at": timestamp(state.issued_at),
        "expires_at": timestamp(state.expires_at),
        "environment": state.environment,
        "signing_key_id": "",
        "signature": "",
        "deployments": sorted(
            (dict(d) for d in deployments), key=lambda d: (str(d["workspace_id"]), str(d["artifact_id"]))
        ),
    }
