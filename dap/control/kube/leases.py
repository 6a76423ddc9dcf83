"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

One replica of a control holds the Lease and renews it every ``duration / 3`` seconds; the others
try again at that pace and take it over once ``renewTime + leaseDurationSeconds`` has passed.
Writes carry the Lease's ``resourceVersion``, so of two replicas racing for an expired Lease one
gets a 409 and stays a follower. ``decide`` is the pure rule; ``Elector`` the I/O around it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from dap import kube

log = logging.getLogger(__name__)
MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"


def identity() -> str:
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}-{uuid.uuid4().hex[:8]}"


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def decide(spec: Mapping[str, Any], me: str, now: datetime) -> bool:
    """May ``me`` write the Lease with this spec? Yes when it holds it, nobody does, or it expired."""
    holder = spec.get("holderIdentity")
    if not holder or holder == me:
        return True
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 15)
    return renewed is None or renewed + timedelta(seconds=duration) < now


class Elector:
    """Holds (or waits for) one Lease; ``leader`` says whether this replica may act now."""

    def __init__(self, client: kube.Client, namespace: str, name: str, duration: float = 15.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.duration = duration
        self.me = identity()
        self._held_until = 0.0

    @property
    def leader(self) -> bool:
        return asyncio.get_running_loop().time() < self._held_until

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True while this replica leads."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        now = datetime.now(UTC)
        stamp = now.strftime(MICRO)
        seconds = max(1, int(self.duration))
        try:
            try:
                current = await self.client.get(kube.LEASES, self.namespace, self.name)
            except kube.NotFoundError:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {
                        "holderIdentity": self.me,
                        "leaseDurationSeconds": seconds,
                        "acquireTime": stamp,
                        "renewTime": stamp,
                        "leaseTransitions": 0,
                    },
                }
                await self.client.create(kube.LEASES, self.namespace, body)
            else:
                spec = dict(current.get("spec") or {})
                if not decide(spec, self.me, now):
                    self._held_until = 0.0
                    return False
                if spec.get("holderIdentity") != self.me:
                    spec["acquireTime"] = stamp
                    spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
                    log.info("taking over lease %s/%s", self.namespace, self.name)
                spec.update(holderIdentity=self.me, renewTime=stamp, leaseDurationSeconds=seconds)
                current["spec"] = spec
                await self.client.replace(kube.LEASES, self.namespace, self.name, current)
        except (kube.ConflictError, kube.ApiError, kube.ApiUnavailableError) as exc:
            log.info("lease %s/%s not held: %s", self.namespace, self.name, exc)
            self._held_until = 0.0
            return False
        # Leading until shortly before another replica could take over.
        self._held_until = started + self.duration * 0.8
        return True

    async def release(self) -> None:
        """Step down at shutdown so a follower takes over at once."""
        if not self._held_until:
            return
        self._held_until = 0.0
        try:
            current = await self.client.get(kube.LEASES, self.namespace, self.name)
            if (current.get("spec") or {}).get("holderIdentity") == self.me:
                current["spec"]["holderIdentity"] = None
                await self.client.replace(kube.LEASES, self.namespace, self.name, current)
        except (kube.ApiError, kube.ApiUnavailableError) as exc:
            log.info("could not release lease %s/%s: %s", self.namespace, self.name, exc)
