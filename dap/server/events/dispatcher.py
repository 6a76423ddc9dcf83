"""The dispatcher: claims undelivered outbox rows, delivers them, retries, dead-letters.

One per server process; several processes share the work safely:

- **Claim** (:data:`CLAIM`): undelivered rows due now (``next_at``) with no older undelivered row
  of the same record, ``FOR UPDATE SKIP LOCKED`` -- only the oldest pending event of a record is
  ever claimable, and a claimed one is invisible to other dispatchers, so two deliveries of one
  record never run out of order, across processes and under retries (a failing event holds the
  record's later events back until it is delivered or dead).
- **Wake**: a dedicated connection ``LISTEN``s on ``dap_outbox`` (one NOTIFY per emitting
  transaction, its id only); a poll every ``poll`` seconds picks up retries that fell due, and
  rows no NOTIFY announced. A create or update through the adapters NOTIFYs nothing while this
  process's dispatcher runs (:attr:`Dispatcher.running`): it calls :meth:`Dispatcher.wake` after
  its commit instead (``Dispatcher.written``: ``operations.Call.wake``, ``events.builtin.joined``).
- **Deliver**: one transaction per batch. Each delivery that writes runs in a savepoint and,
  when it succeeds, its ``(consumer, event_id)`` row goes into ``dap.event_deliveries`` in that
  same transaction (one insert for the batch); a delivery already settled is skipped. What a
  delivery writes (a reliable_event's effect above all) therefore commits exactly once with its
  row; a process killed mid-batch leaves nothing committed, and the next claim repeats the batch.
- **Retry**: a failed delivery leaves the row undelivered with ``attempts + 1``, ``last_error``
  and ``next_at`` after the declared ``RetryDecl``'s backoff; once it has failed more than
  ``max_attempts`` times it is written to ``dap.dead_letter`` and settled as ``dead``.
- **Feed**: a row whose deliveries are all settled gets ``delivered_at`` and its ``seq`` from
  ``dap.outbox_feed_seq`` under a transaction-level advisory lock held to the commit, so ``seq``
  order is commit order; the transaction NOTIFYs ``dap_feed`` (see ``feed``).
- **Prune**: delivered rows older than ``keep`` seconds are deleted (websocket resume reaches that
  far back), so the table's dead tuples stay bounded.
- **Vacuum**: marking a row delivered leaves its old version's entries in the two partial indexes
  of undelivered rows until a vacuum removes them, and autovacuum visits a database at most once
  a minute. A claim whose plan walks ``outbox_record_undelivered`` visits the heap for each such
  entry at every round (new events' random record ids keep changing that index's pages, so
  Postgres cannot mark the entries dead as it passes): measured, the claim grew from 0.3 to
  2-3 ms per event within 18,000 events (docs/performance.md, "The dispatcher's cost per
  write"). A running dispatcher that marked ``vacuum_after`` rows since its last vacuum therefore
  vacuums ``dap.outbox`` itself, in the background on a connection of its own (``SKIP_LOCKED``:
  never behind another vacuum or autovacuum), and waits long enough after each that vacuuming
  takes at most ``vacuum_share`` of its time, however large the table of kept rows has grown.
- **Trace**: each event's deliveries run in a span whose parent is the outbox row's
  ``traceparent`` (the span that wrote it), and each delivery in a child of that, so a webhook sent
  seconds later by another process belongs to the request's trace (``dap.tracing``).
- **Stop**: no new batch is claimed, and the batch in flight, whose webhooks may already have been
  sent, is given ``stop_grace`` seconds to commit. Cancelling it at once rolled it back, and another
  process delivered it again (a receiver saw the same id twice whenever a pod was replaced); only a
  batch still running after the grace is cancelled (still at least once: repeated elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import types
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap import tracing
from dap.config.entities import EntitySpec
from dap.config.enums import EventChannel
from dap.server.events import channels, measures, outbox, plans, slots, wal, walstream
from dap.server.events.claims import (  # the tests read them here too
    CLAIM,
    DEAD,
    DONE,
    DUE,
    PRUNE,
    RETRY,
    SETTLE,
    SETTLED,
    VACUUM,
)
from dap.server.storage import db

log = logging.getLogger(__name__)
FEED_LOCK = 0x64617066  # 'dapf': serialises giving out feed positions (held to the commit)

# channels that write nothing to Postgres need no savepoint around them
_NO_WRITES = frozenset({EventChannel.WEBHOOK, EventChannel.WEBSOCKET})
decode_payload = db.decode_json  # the jsonb codec's decoder, for payloads the claim read as text
_LAZY: Mapping[str, Any] = types.MappingProxyType({})  # a claimed payload until it is decoded


@dataclass
class Settings:
    batch: int = 100
    poll: float = 1.0  # seconds between polls for retries that fell due
    keep: float = 3600.0  # seconds delivered rows are kept (websocket resume)
    # only these tenants' events (a resource pod: its workspace's); None: every tenant's
    tenants: frozenset[uuid.UUID] | None = None
    # seconds a stop waits for the batch in flight to commit (a pod has 30 s between SIGTERM and
    # SIGKILL, 5 of them spent in preStop)
    stop_grace: float = 10.0
    # rows marked delivered by this process before it vacuums the outbox (0: never; see the module)
    vacuum_after: int = 2000
    # the most of its time a dispatcher spends vacuuming: after a vacuum of t seconds, none for
    # t * (1 / share - 1) seconds
    vacuum_share: float = 0.05


def vacuum_due(settings: Settings, marked: int, now: float, after: float, busy: bool) -> bool:
    """Whether a running dispatcher that marked ``marked`` rows since its last vacuum began should
    vacuum the outbox now: enough rows, the last one's pause (``after``) over, none running."""
    return settings.vacuum_after > 0 and marked >= settings.vacuum_after and now >= after and not busy


class Dispatcher:
    """The process's dispatcher; ``start`` then ``stop``."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        entities: Callable[[], dict[str, EntitySpec]],
        deliveries: channels.Channels,
        counters: measures.Counters,
        settings: Settings | None = None,
    ) -> None:
        self.pool, self.dsn, self.entities = pool, dsn, entities
        self.channels, self.counters = deliveries, counters
        self.settings = settings or Settings()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listener = db.Listener(dsn, outbox.CHANNEL, self._wake, self._heard)
        self._more = False  # the last batch left other rows due (or was full): claim again
        self._retried = False  # a delivery of this process failed since the last ``DUE``
        self._due_checked = -1e9  # loop time of the last ``DUE``
        self._next_due: float | None = None  # loop time of the next retry it found
        self._marked = 0  # rows this process marked delivered since its last vacuum began
        self._vacuum_next = 0.0  # loop time before which no vacuum begins
        self._vacuuming: asyncio.Task[None] | None = None
        self.vacuums = 0  # vacuums of the outbox this dispatcher ran to the end
        # events as WAL messages (``wal``): the slot read (None: the outbox only), the end of the
        # last transaction the round read, events handed to the outbox (retries) this round, and
        # whether the outbox is claimed at the next round (its retries, replays, other writers)
        self.slot: str | None = None
        self.slot_last: str | None = None
        # ``wal``'s walsender stream (``walstream``; None: not open, or ``wal-sql``'s peeks)
        self.streamed = False
        self.stream: walstream.Stream | None = None
        self.watch = walstream.Watch(counters.stream)  # its streams' opens, waits and ends, logged
        self._notified = False  # a NOTIFY came (a replay, a row of another writer): claim the outbox
        self.handed = 0
        self._claim_outbox = True
        self.feed_lock, self.feed_channel = FEED_LOCK, outbox.FEED
        self.snapshots = True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dap-events-dispatcher")

    async def stop(self) -> None:
        """Claims nothing more; the batch in flight commits, or is cancelled after ``stop_grace``."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wake.set()
            try:
                async with asyncio.timeout(self.settings.stop_grace):
                    await asyncio.shield(task)
            except TimeoutError:
                log.warning("events dispatcher: the batch in flight outlasted the stop grace; cancelled")
            finally:  # after the grace, or when this stop is itself cancelled
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                self._stopping = False
        vacuuming, self._vacuuming = self._vacuuming, None
        if vacuuming is not None and not vacuuming.done():
            vacuuming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await vacuuming
        stream, self.stream = self.stream, None
        if stream is not None:
            await stream.close()
        await self._unlisten()

    def _heard(self, _payload: str) -> None:
        self._notified = True

    def wake(self) -> None:
        """Look for work now, in the outbox too (a row written without a NOTIFY)."""
        self._notified = True
        self._wake.set()

    def arrived(self) -> None:
        """The stream queued events (``walstream``)."""
        self._wake.set()

    def written(self) -> None:
        """A write of this process committed its event (``state.Events.local_wake``); a stream
        brings that event by itself."""
        if not self.streamed:
            self._wake.set()

    @property
    def running(self) -> bool:
        """Whether this process delivers (started, not stopped; ``DAP_EVENTS_DISPATCH=0`` never starts it)."""
        return self._task is not None

    async def _listen(self) -> None:
        try:
            await self._listener.ensure()
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("events dispatcher cannot LISTEN (polling only): %r", exc)

    async def _unlisten(self) -> None:
        await self._listener.close()

    async def _ensure_slot(self) -> None:
        """With ``DAP_EVENTS_SOURCE=wal``: this database's slot (made when missing), read from now."""
        if self.slot is not None or not outbox.selected():
            return
        async with db.connection(self.pool) as conn:
            name = slots.slot_name(await conn.fetchval("SELECT current_database()"), self.settings.tenants)
            await slots.ensure(conn, name)
        self.slot, self.streamed = name, outbox.source() == "wal"

    async def _run(self) -> None:
        rounds = 0
        while not self._stopping:
            await self._listen()
            try:
                await self._ensure_slot()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("events dispatcher cannot read its slot")
            self._wake.clear()
            wait = self.settings.poll
            try:
                # on while more waits, even if the round settled nothing (issue 46: ``walstream``)
                while not self._stopping:
                    await self.drain_once()
                    if not self._more:
                        break
                    self._vacuum_if_due()
                if self._stopping:
                    return
                self._vacuum_if_due()
                rounds += 1
                now = asyncio.get_running_loop().time()
                if rounds % 60 == 1:
                    async with db.connection(self.pool) as conn:
                        await conn.execute(PRUNE, self.settings.keep)
                if self._due_needed(now):
                    self._retried, self._due_checked = False, now
                    async with db.connection(self.pool) as conn:
                        due = await conn.fetchval(DUE, self._tenants())
                    self._next_due = None if due is None else now + due
                if self._next_due is not None:  # the next retry, when sooner than the poll
                    wait = min(wait, max(0.05, self._next_due - now))  # retrying rows only: new ones wake it
            except asyncio.CancelledError:
                raise
            except Exception:  # Postgres away, a bug: log, wait, go on -- never die silently
                log.exception("events dispatcher round failed")
            if self._stopping:
                return
            try:
                async with asyncio.timeout(wait):  # not wait_for: 3.11 loses a stop there
                    await self._wake.wait()
            except TimeoutError:
                self._claim_outbox = True  # a poll: retries that fell due, rows nobody announced

    def _vacuum_if_due(self) -> None:
        now = asyncio.get_running_loop().time()
        busy = self._vacuuming is not None and not self._vacuuming.done()
        if vacuum_due(self.settings, self._marked, now, self._vacuum_next, busy):
            self._marked = 0
            self._vacuuming = asyncio.create_task(self._vacuum(), name="dap-events-vacuum")

    async def _vacuum(self) -> None:
        """``VACUUM dap.outbox`` on a connection of its own (on a large table it runs for a while:
        never on one the requests wait for); a failure is logged (claims only get slower), and
        the next one waits as ``vacuum_share`` allows."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(VACUUM)
            finally:
                await conn.close()
            self.vacuums += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("events dispatcher: VACUUM dap.outbox failed: %r", exc)
        finally:
            ended = loop.time()
            self._vacuum_next = ended + (ended - began) * (1 / self.settings.vacuum_share - 1)

    def _due_needed(self, now: float) -> bool:
        """Whether to ask Postgres when the next retry falls due: after a failed delivery here,
        once the retry it last found is due, and once per ``poll`` (another process's retries);
        not after every round of a busy dispatcher, whose rounds follow each write."""
        return (
            self._retried
            or (self._next_due is not None and self._next_due <= now)
            or now - self._due_checked >= self.settings.poll
        )

    @property
    def tenants(self) -> frozenset[uuid.UUID] | None:
        return self.settings.tenants

    def _tenants(self) -> list[uuid.UUID] | None:
        tenants = self.settings.tenants
        return sorted(tenants) if tenants is not None else None

    async def drain_once(self) -> int:
        """Claim and settle one batch in one transaction; how many rows (or, from the slot, events)
        were read. Whether to read again at once is left in ``_more``: the batch was full, some of
        it waits for a retry, or other rows are due (a record's next event, held back while this
        batch held its older one). With events as WAL messages (``wal``), the slot is read first;
        the outbox (retries, replays, other writers' rows) when due (``_claim_outbox``)."""
        self._more = False
        read = 0
        if self.slot is not None:
            if self.streamed:
                read, more = await walstream.drain_once(self, self.slot, self.settings.batch)
            else:
                async with db.connection(self.pool) as conn, db.committed(conn):
                    read, more, last = await wal.drain(self, conn, self.slot, self.settings.batch)
                self.slot_last = last  # committed: the next round advances the slot to it
            self._marked += read
            # the outbox too: when polled (retries due), when this round handed it events, and
            # when woken with nothing in the slot (a replay's or another writer's row); a stream
            # wakes the dispatcher itself, so there only a NOTIFY tells of an outbox row
            woken = not read and (self._notified or not self.streamed)
            if not woken and not self._claim_outbox and not self.handed:
                self._more = more
                return read
            self.handed, self._claim_outbox, self._notified = 0, False, False
            claimed = await self._drain_outbox()
            self._more = self._more or more
            return read + claimed
        return await self._drain_outbox()

    async def _drain_outbox(self) -> int:
        async with db.connection(self.pool) as conn, db.committed(conn):
            rows = await conn.fetch(CLAIM, self.settings.batch, self._tenants())
            events = [channels.Event.of(row, _LAZY) for row in rows]
            payloads = {row["id"]: row["payload"] for row in rows}
            outcome = await self.deliver(conn, events, set(), payloads)
            done = [event.id for event in events if event.id not in outcome]
            for event_id, (error, wait) in outcome.items():
                await conn.execute(RETRY, event_id, error, wait)
            more = len(rows) >= self.settings.batch or len(done) < len(rows)
            if done:
                await conn.execute("SELECT pg_advisory_xact_lock($1)", FEED_LOCK)
                found = await conn.fetchrow(DONE, done, outbox.FEED, self._tenants())
                more = more or bool(found is not None and found["more"])
        self._marked += len(done)
        self._more = self._more or more
        self._claim_outbox = self._claim_outbox or more  # with a slot: its next round claims again
        return len(rows)

    async def deliver(
        self,
        conn: db.Connection,
        events: list[channels.Event],
        held: set[tuple[uuid.UUID, uuid.UUID | None]],
        payloads: dict[int, str] | None = None,
    ) -> dict[int, tuple[str | None, float]]:
        """Every pending delivery of ``events`` (in order) in the caller's transaction, their
        settlements written; the ones not settled: ``(error, seconds to the retry)``, or ``(None,
        0)`` for one held behind an earlier unsettled event of its record (``held``: such records,
        grown by each failure). The one delivery code of both sources: the outbox's claim and the
        slot's messages. ``payloads``: the claim's payloads as text, decoded only where needed."""
        entities = self.entities()
        planned = []
        outcome: dict[int, tuple[str | None, float]] = {}
        for event in events:
            if (event.tenant, event.record_id) in held:
                outcome[event.id] = (None, 0.0)
                continue
            spec = entities.get(event.entity)
            deliveries = plans.deliveries(spec, event.entity, event.event, event.consumers)
            if not deliveries:  # most created/updated events: settled as read, only a feed position
                continue
            if payloads is not None:
                event = dataclasses.replace(event, payload=decode_payload(payloads[event.id]))
            planned.append((event, deliveries))
        keys = list({channels.settle_id(d, e) for e, ds in planned for d in ds})
        settled = {(r["consumer"], r["event_id"]) for r in await conn.fetch(SETTLED, keys)} if keys else set()
        outcomes: list[tuple[str, uuid.UUID, str]] = []
        for event, deliveries in planned:
            if (event.tenant, event.record_id) in held:
                outcome[event.id] = (None, 0.0)
                continue
            # a child of the span that wrote the event (its traceparent)
            with tracing.span(
                f"outbox {event.entity}.{event.event}",
                kind="consumer",
                parent=event.traceparent,
                attributes={
                    "dap.tenant": str(event.tenant),
                    "dap.event_id": str(event.public_id),
                    "dap.request_id": event.request_id,
                    "enduser.id": event.actor_sub,
                    "dap.attempt": event.attempts + 1,
                },
            ):
                failed = await self._one(conn, event, deliveries, settled, outcomes)
            if failed is not None:
                outcome[event.id] = failed
                if event.record_id is not None:
                    held.add((event.tenant, event.record_id))
        if outcomes:  # in this transaction: with the effects they settle, or not at all
            await conn.execute(SETTLE, *(list(column) for column in zip(*outcomes, strict=True)))
        return outcome

    async def _one(
        self,
        conn: db.Connection,
        event: channels.Event,
        deliveries: tuple[plans.Delivery, ...],
        settled: set[tuple[str, uuid.UUID]],
        outcomes: list[tuple[str, uuid.UUID, str]],
    ) -> tuple[str, float] | None:
        """Every pending delivery of ``event`` (``settled``: (consumer, settle id) already done;
        each one settled now joins ``outcomes`` and ``settled``); ``None`` when the event is
        settled, else the error and the seconds until its retry."""
        failed: list[tuple[plans.Delivery, str]] = []
        attempts = event.attempts + 1
        for delivery in deliveries:
            key = channels.settle_id(delivery, event)
            if (delivery.consumer, key) in settled:
                continue
            channel = str(delivery.channel)
            if event.attempts == 0:
                self.counters.emitted.labels(channel).inc()
            try:
                with tracing.span(f"deliver {delivery.consumer}", attributes={"dap.channel": channel}):
                    if delivery.channel in _NO_WRITES and delivery.decl.handler is None:
                        await self.channels.deliver(conn, event, delivery)
                    else:
                        async with conn.transaction():  # a savepoint: a failed delivery leaves nothing
                            await self.channels.deliver(conn, event, delivery)
                outcomes.append((delivery.consumer, key, "delivered"))
                settled.add((delivery.consumer, key))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"[:2000]
                if plans.exhausted(delivery.retry, attempts):
                    await conn.execute(
                        DEAD,
                        event.id,
                        event.public_id,
                        event.tenant,
                        event.entity,
                        event.event,
                        delivery.consumer,
                        channel,
                        attempts,
                        error,
                        key,
                    )
                    outcomes.append((delivery.consumer, key, "dead"))
                    settled.add((delivery.consumer, key))
                    await self._dead_target(conn, event, delivery)
                    self.counters.dead.labels(channel).inc()
                    log.warning("event delivery dead", extra={"ctx": {"consumer": delivery.consumer}})
                else:
                    failed.append((delivery, error))
                    self.counters.retried.labels(channel).inc()
                continue
            self.counters.delivered.labels(channel).inc()
            self.counters.lag.labels(channel).observe(max(0.0, time.time() - event.created_at.timestamp()))
        if failed:
            self._retried = True
            return failed[0][1], min(plans.backoff(d.retry, attempts) for d, _ in failed)
        return None

    async def _dead_target(
        self, conn: db.Connection, event: channels.Event, delivery: plans.Delivery
    ) -> None:
        """A declared ``dead_letter`` target (``resource`` + ``action``) runs once with the dead
        event, in a savepoint; its failure is logged (the dead-letter row stands either way)."""
        target = delivery.decl.dead_letter
        if target is None or target.action is None or self.channels.runner is None:
            return
        try:
            async with conn.transaction():
                await self.channels.runner(conn, event, target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "dead_letter target failed",
                extra={"ctx": {"consumer": delivery.consumer, "error": f"{type(exc).__name__}: {exc}"}},
            )
