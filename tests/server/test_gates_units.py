"""The pool's first-come, first-served gate (``storage.gates``), on its own: order, hand-over and
cancellation, the cases a lost place would leave a pool short of a connection for good."""

from __future__ import annotations

import asyncio

import pytest

from dap.server.storage.gates import Gate


async def test_callers_past_the_places_are_served_in_arrival_order() -> None:
    gate = Gate(2)
    served: list[int] = []

    async def caller(n: int) -> None:
        async with gate:
            served.append(n)
            await asyncio.sleep(0.001 * (n % 3))

    await asyncio.gather(*(caller(n) for n in range(40)))
    assert served == list(range(40))
    assert gate.waiting == 0
    # every place came back: two callers get in at once, a third waits
    await gate.acquire()
    await gate.acquire()
    third = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    assert not third.done() and gate.waiting == 1
    gate.release()
    await asyncio.wait_for(third, 1)


async def test_a_newcomer_never_takes_a_place_released_for_a_waiter() -> None:
    gate = Gate(1)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # handed to the waiter, which has not run yet
    newcomer = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    assert waiter.done() and not newcomer.done()
    gate.release()
    await asyncio.wait_for(newcomer, 1)


async def test_a_cancelled_waiter_leaves_the_queue_and_loses_no_place() -> None:
    gate = Gate(1)
    await gate.acquire()
    leaving = asyncio.create_task(gate.acquire())
    staying = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert gate.waiting == 1
    gate.release()
    await asyncio.wait_for(staying, 1)


async def test_a_release_between_a_waiters_cancellation_and_its_leaving_loses_nothing() -> None:
    gate = Gate(1)
    await gate.acquire()
    leaving = asyncio.create_task(gate.acquire())
    staying = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    leaving.cancel()  # its place is cancelled now, but the task has not run its clean-up yet
    gate.release()  # skips the cancelled place, hands this one to the next
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await asyncio.wait_for(staying, 1)
    assert gate.waiting == 0
    gate.release()
    await asyncio.wait_for(gate.acquire(), 1)


async def test_a_waiter_cancelled_after_it_was_handed_a_place_passes_it_on() -> None:
    gate = Gate(1)
    await gate.acquire()
    handed = asyncio.create_task(gate.acquire())
    next_in_line = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # the place goes to ``handed``...
    handed.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(next_in_line, 1)  # the place went on, not lost
    gate.release()
    await asyncio.wait_for(gate.acquire(), 1)  # and it is free again once released


def test_a_gate_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least one place"):
        Gate(0)


async def test_waits_are_counted_for_the_metrics_only_when_a_caller_queues() -> None:
    gate: Gate[None] = Gate(1)
    await gate.acquire()
    assert (gate.waited, gate.waited_seconds) == (0, 0.0)  # a free place: no wait
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0.02)
    gate.release()
    await second
    assert gate.waited == 1 and gate.waited_seconds >= 0.015
