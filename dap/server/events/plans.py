"""Which deliveries an event has, when a failed one is tried again, and what type it is (pure).

A delivery is one ``deliver`` entry of the entity's ``EventDecl`` of the event's name; its
*consumer* names it stably (``entity:event:index:channel``), so a delivery settled once is
recognised after a restart, and a replay can name the one delivery to repeat. ``queue`` entries
are declared but not delivered (validation warns); they have no plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from dap.config import durations
from dap.config.actions import Action, RetryDecl
from dap.config.entities import EntitySpec
from dap.config.enums import CallMode, EventChannel
from dap.config.events import EventDecl, EventDeliveryDecl
from dap.server import errors

DEFAULT_RETRY = RetryDecl()
BUILTIN = frozenset({"created", "updated", "deleted", "submitted", "cancelled"})
TYPE_MISSING = "SVC.EVENT.TYPE_MISSING"
TYPE_MISMATCH = "SVC.EVENT.TYPE_MISMATCH"


@dataclass(frozen=True)
class Delivery:
    consumer: str
    channel: EventChannel
    decl: EventDeliveryDecl
    topic: str = "dap_events"  # the event's ``publish.topic`` (pubsub)
    scope: str = "workspace"  # the event's ``publish.scope``: workspace or global

    @property
    def retry(self) -> RetryDecl:
        return self.decl.retry or DEFAULT_RETRY


def deliveries(
    spec: EntitySpec | None, entity: str, event: str, only: list[str] | None = None
) -> tuple[Delivery, ...]:
    """The deliveries of ``event`` of ``entity`` (``only``: just these consumers, for a replay)."""
    decl = spec.event(event) if spec is not None else None
    if decl is None:
        return ()
    out = []
    for i, d in enumerate(decl.deliver):
        if d.channel is EventChannel.QUEUE:
            continue
        consumer = f"{entity}:{event}:{i}:{d.channel}"
        if only is None or consumer in only:
            publish = decl.publish
            topic = publish.topic if publish is not None and publish.topic else "dap_events"
            scope = publish.scope if publish is not None else "workspace"
            out.append(Delivery(consumer, d.channel, d, topic, scope))
    return tuple(out)


def backoff(retry: RetryDecl, attempts: int) -> float:
    """Seconds before try ``attempts + 1`` after ``attempts`` failed ones (exponential, capped)."""
    first = durations.parse(retry.backoff).total_seconds()
    cap = durations.parse(retry.max_backoff).total_seconds()
    return float(min(cap, first * retry.multiplier ** max(0, attempts - 1)))


def exhausted(retry: RetryDecl, attempts: int) -> bool:
    """Whether a delivery that has failed ``attempts`` times is dead: the first try plus
    ``max_attempts`` retries."""
    return attempts > retry.max_attempts


def event_type(spec: EntitySpec, name: str, action: Action | None = None) -> CallMode:
    """The type of event ``name`` emitted by ``action``: declared, derived from the name, or
    ``async`` for an undeclared built-in event.

    ``SVC.EVENT.TYPE_MISSING`` (422) when ``name`` is neither declared nor built-in (an invoke
    response returned an event the entity does not declare); ``SVC.EVENT.TYPE_MISMATCH`` (422)
    when a ``sync`` event is emitted by an action called ``async``: nobody waits for the action,
    so nothing can be delivered before its request answers.
    """
    decl: EventDecl | None = spec.event(name)
    if decl is None:
        if name in BUILTIN:
            return CallMode.ASYNC
        raise errors.ValidationFailed(
            f"event {name!r} is not declared in spec.events; declare it (with its type) or emit a "
            "declared event",
            code=TYPE_MISSING,
        )
    kind = decl.effective_type
    if kind is CallMode.SYNC and action is not None and action.call is CallMode.ASYNC:
        raise errors.ValidationFailed(
            f"event {name!r} is sync but action {action.name!r} is called async, so the event "
            "cannot be delivered before the request answers; declare the event type: async or "
            "name it async_*",
            code=TYPE_MISMATCH,
        )
    return kind
