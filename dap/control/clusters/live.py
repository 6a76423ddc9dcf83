"""The in-memory state that answers snapshot polls without the database.

Region and standalone: ``Live.state`` (``snapshots.State``) is reloaded from Postgres after every
change this process makes and on every ``NOTIFY dap_control_changed`` (changes by other
processes on the same database, such as ``dap control revoke``). Signed bodies are cached per
query for the life of a state, so a 200 costs one signature per (version, query) and a 304 costs
a string comparison.

Cluster: ``Live.region`` holds the region-signed snapshot bytes and their ETag; the cluster cannot
re-sign (it holds no signing key), so pods receive exactly what the region signed.

Waiters (dev long-poll) park on an ``asyncio.Event`` that is replaced on every change or poke.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from dap.control.trust import signing, snapshots


@dataclass(frozen=True)
class RegionSnapshot:
    etag: str
    body: bytes
    version: int


class Live:
    def __init__(self, state: snapshots.State, signer: signing.Signer | None) -> None:
        self.state = state
        self.signer = signer
        self.region: RegionSnapshot | None = None
        self._changed = asyncio.Event()
        self._waiting = 0

    def replace(self, state: snapshots.State) -> None:
        self.state = state
        self.wake()

    def set_region(self, snapshot: RegionSnapshot) -> None:
        self.region = snapshot
        self.wake()

    def wake(self) -> int:
        """Release every parked waiter; return how many were waiting."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        return self._waiting

    async def wait(self, seconds: float) -> bool:
        """Park until the next change or poke; False when ``seconds`` passed first."""
        event = self._changed
        self._waiting += 1
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1
        return True

    def current(self, now: datetime | None = None) -> snapshots.State:
        """The state, re-issued (same version, new issued_at) once half its lifetime passed."""
        moment = now or datetime.now(UTC)
        if self.state.needs_reissue(moment):
            self.state = dataclasses.replace(self.state, issued_at=moment.replace(microsecond=0), bodies={})
        return self.state

    def signed_body(self, state: snapshots.State, workspace: str | None, cluster: str | None) -> bytes:
        key = (workspace, cluster)
        body = state.bodies.get(key)
        if body is None:
            if self.signer is None:
                raise RuntimeError("a snapshot is signed only where a signing key is loaded")
            selected = snapshots.select(state.deployments, workspace=workspace, cluster=cluster)
            body = signing.canonical_json(self.signer.sign(snapshots.document(state, selected)))
            state.bodies[key] = body
        return body
