"""A first-come, first-served gate: ``n`` places, and callers past them served in arrival order.

``db.connection`` puts one in front of asyncpg's pool (see there for why). asyncio's ``Semaphore``
is first-come, first-served too, but every ``acquire`` it sees while callers wait walks all of
them (``locked()`` asks whether any waiter is not cancelled), and a ``release`` wakes the next
waiter through the permit count, which the woken task takes back later. Under the load the gate
exists for -- more requests than connections, all the time -- that is one walk of the queue per
request. Here a release hands its place straight to the oldest waiter: no walk, no newcomer can
take the place meanwhile, and a caller finds a place free only when nobody waits.

A place can be handed over with an item -- the connection its holder used -- so that the waiter
skips taking one from the pool and the holder skips giving it back (:meth:`Gate.hand_over`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Gate(Generic[T]):
    """``places`` at a time: ``await acquire()`` then ``release()`` or ``hand_over(item)``.

    ``acquire`` answers the item the place came with, ``None`` for a bare place. ``orphan`` takes
    an item handed to a waiter that was cancelled before it could use it, when no other caller
    waits for it: its owner puts the item back and then calls ``release()`` for its place.
    """

    __slots__ = ("_free", "_orphan", "_waiters", "waited", "waited_seconds")

    def __init__(self, places: int, orphan: Callable[[T], None] | None = None) -> None:
        if places < 1:
            raise ValueError(f"a gate needs at least one place, not {places}")
        self._free = places
        self._orphan = orphan
        self._waiters: deque[asyncio.Future[T | None]] = deque()
        self.waited = 0  # acquires that had to queue (the metrics' pool waits), and their time
        self.waited_seconds = 0.0

    @property
    def waiting(self) -> int:
        """Callers queued for a place (cancelled ones may still count until they leave)."""
        return len(self._waiters)

    async def acquire(self) -> T | None:
        if self._free and not self._waiters:
            self._free -= 1
            return None
        loop = asyncio.get_running_loop()
        place: asyncio.Future[T | None] = loop.create_future()
        self._waiters.append(place)
        began = loop.time()
        try:
            return await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self._pass_on(place.result())  # handed a place as the caller was cancelled
            elif place in self._waiters:  # a release may have dropped it already (it was done)
                self._waiters.remove(place)
            raise
        finally:
            self.waited += 1
            self.waited_seconds += loop.time() - began

    def release(self) -> None:
        """Give the place to the oldest caller still waiting, else free it."""
        if not self.hand_over(None):
            self._free += 1

    def hand_over(self, item: T | None) -> bool:
        """Give the place, with ``item``, to the oldest caller still waiting; ``False`` when none
        waits (the caller keeps both: it puts the item back and releases the place)."""
        waiters = self._waiters
        while waiters:
            place = waiters.popleft()
            if not place.done():
                place.set_result(item)
                return True
        return False

    def _pass_on(self, item: T | None) -> None:
        if item is None:
            self.release()
        elif not self.hand_over(item):
            if self._orphan is None:
                raise RuntimeError("an item was handed over in a gate that takes none back")
            self._orphan(item)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
