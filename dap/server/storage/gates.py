"""A first-come, first-served gate: ``n`` places, and callers past them served in arrival order.

``db.connection`` puts one in front of asyncpg's pool (see there for why). asyncio's ``Semaphore``
is first-come, first-served too, but every ``acquire`` it sees while callers wait walks all of
them (``locked()`` asks whether any waiter is not cancelled), and a ``release`` wakes the next
waiter through the permit count, which the woken task takes back later. Under the load the gate
exists for -- more requests than connections, all the time -- that is one walk of the queue per
request. Here a release hands its place straight to the oldest waiter: no walk, no newcomer can
take the place meanwhile, and a caller finds a place free only when nobody waits.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Gate:
    """``async with gate:``, or ``await acquire()`` then ``release()``, with ``places`` at a time."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, places: int) -> None:
        if places < 1:
            raise ValueError(f"a gate needs at least one place, not {places}")
        self._free = places
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Callers queued for a place (cancelled ones may still count until they leave)."""
        return len(self._waiters)

    async def acquire(self) -> None:
        if self._free and not self._waiters:
            self._free -= 1
            return
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(place)
        try:
            await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self.release()  # handed a place as the caller was cancelled: pass it on
            else:
                self._waiters.remove(place)
            raise

    def release(self) -> None:
        """Give the place to the oldest caller still waiting, else free it."""
        waiters = self._waiters
        while waiters:
            place = waiters.popleft()
            if not place.done():
                place.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
