"""dap.server.events — what happens after a write: the transactional outbox and its delivery.

Above documents (an event is written in the transaction of the write that caused it, and the
``audit_log`` channel writes the audit trail) and below workflows (which emit events from custom
actions) and web (websocket, notifications, dead-letter replay). Where a delivery must run an
action (``reliable_event``), the runner is a callable injected at boot, so this package never
imports workflows. Its face is the modules in ``__all__``::

    outbox       ``dap.outbox`` and its companions: the tables, ``emit`` in the caller's transaction
    builtin      the built-in events of the standard actions (created, updated, deleted, ...)
    plans        which deliveries an event has, from its ``EventDecl`` (pure)
    channels     one delivery on one channel: audit_log, webhook, notification, pubsub, ...
    claims       the outbox path's statements (the claim, settlements, retries, feed positions)
    dispatcher   claims undelivered rows (``FOR UPDATE SKIP LOCKED``), delivers, retries, dead-letters
    feed         the delivered events in commit order, fanned out to websocket subscribers
    deadletter   dead deliveries: listing and replay
    measures     the counters per channel: emitted, delivered, retried, dead
    notifications in-app notifications per user, and the pluggable email/sms sender
    slots        events as logical WAL messages (``DAP_EVENTS_SOURCE=wal``): the replication slot
    wal          ... reading the slot: the messages delivered by the dispatcher's delivery code
    brokers      where pubsub publishes: DAP_NATS_URL, else the spec's nats Datastore, else NOTIFY

Modules load on first import (none is imported here): the boot path needs ``outbox`` only.
"""

__all__ = [
    "brokers",
    "builtin",
    "channels",
    "claims",
    "deadletter",
    "dispatcher",
    "feed",
    "measures",
    "notifications",
    "outbox",
    "plans",
    "slots",
    "wal",
]
