"""One delivery of one event on its channel; a failure is an exception (the dispatcher retries).

Every function runs inside the dispatcher's transaction on the claimed row, so what a delivery
writes to Postgres (an audit row, a notification, a reliable_event's effect, a pubsub NOTIFY)
commits together with the row that says it was delivered, or not at all.

- ``audit_log``: a ``dap.audit_log`` row (action ``event:<name>``, ``changes`` empty);
- ``webhook``: an HTTP POST/PUT of the event signed with the Standard Webhooks scheme
  (``webhook-id`` = the event's public id, stable over retries; ``webhook-timestamp``;
  ``webhook-signature`` when ``sign``); any status but 2xx fails;
- ``reliable_event``: the injected :data:`Runner` runs the target action on the same
  connection (its effect commits with the ``(consumer, event_id)`` row: exactly once);
- ``notification``: ``in_app`` rows in ``dap.notifications`` per recipient; ``email``/``sms``
  through the pluggable :data:`Sender` (:func:`log_sender` by default);
- ``pubsub``: with a NATS connection (the spec's ``nats`` Datastore or ``DAP_NATS_URL``, see
  ``brokers``), the event message published on subject
  ``<topic>.<tenant>`` (``publish.scope: workspace``, the default) or ``<topic>`` (``global``),
  flushed before the delivery counts (at least once: a batch rolled back after it publishes
  again); without one, ``NOTIFY <topic>`` with the event's ids, committed with the row (Postgres
  LISTEN/NOTIFY). ``topic`` is ``PublishDecl.topic``, default ``dap_events``;
- ``websocket``: nothing to do here: every delivered event reaches the websocket feed.

A delivery that declares ``handler`` (the spec's "action that also delivers") first runs that
action of the event's own entity on the event's record through the same :data:`Runner`, then its
channel: both in the delivery's savepoint, so the handler's effect commits with the delivery's
``(consumer, event_id)`` row (exactly once) and a failed channel rolls it back for the retry.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import asyncpg
import standardwebhooks

from dap import tracing
from dap.config.enums import EventChannel
from dap.config.events import DeliveryTarget, NotificationDecl
from dap.server.documents import auditing
from dap.server.events import brokers, plans
from dap.server.storage import db

log = logging.getLogger(__name__)
TOPIC = "dap_events"
WEBHOOK_TIMEOUT = 10.0


@dataclass(frozen=True)
class Event:
    """One claimed ``dap.outbox`` row."""

    id: int
    public_id: uuid.UUID
    tenant: uuid.UUID
    entity: str
    record_id: uuid.UUID | None
    action: str
    event: str
    payload: Mapping[str, Any]
    version: int | None
    actor_sub: str | None
    actor_username: str | None
    request_id: str | None
    created_at: datetime
    attempts: int
    consumers: list[str] | None
    traceparent: str | None = None  # the writing span's W3C traceparent (``dap.tracing``)

    @classmethod
    def of(cls, row: asyncpg.Record, payload: Mapping[str, Any] | None = None) -> Event:
        """The event of an outbox row; ``payload``, when given, instead of the row's (the
        dispatcher's claim reads it as text and decodes only what it delivers)."""
        return cls(
            row["id"],
            row["public_id"],
            row["tenant_id"],
            row["entity"],
            row["record_id"],
            row["action"],
            row["event"],
            row["payload"] if payload is None else payload,
            row["version"],
            row["actor_sub"],
            row["actor_username"],
            row["request_id"],
            row["created_at"],
            row["attempts"],
            row["consumers"],
            row.get("traceparent"),
        )

    def message(self) -> dict[str, Any]:
        """The event as consumers receive it (webhook body, websocket ``event`` frame data)."""
        return {
            "id": str(self.public_id),
            "type": f"{self.entity}.{self.event}",
            "entity": self.entity,
            "event": self.event,
            "action": self.action,
            "record_id": str(self.record_id) if self.record_id is not None else None,
            "version": self.version,
            "actor": self.actor_username,
            "at": self.created_at.isoformat(),
            "payload": dict(self.payload),
        }


# runs a reliable_event's target action on the dispatcher's connection, inside its transaction
Runner = Callable[[db.Connection, Event, DeliveryTarget], Awaitable[None]]
# sends one email or sms: (medium, recipient username, subject, body)
Sender = Callable[[str, str, str | None, str], Awaitable[None]]
# publishes one message on a NATS subject and flushes: (subject, body)
Publisher = Callable[[str, bytes], Awaitable[None]]


async def log_sender(medium: str, to: str, subject: str | None, body: str) -> None:
    """The default sender: logs the message (no mail or sms gateway is configured)."""
    log.info("notification", extra={"ctx": {"medium": medium, "to": to, "subject": subject, "body": body}})


_PLACE = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_.]*)\s*\}\}")


def render(template: str, event: Event) -> str:
    """``{{ field }}`` (the record's), ``{{ event }}``, ``{{ actor }}`` filled in (pure)."""
    record = event.payload.get("record") or {}
    facts = {"event": event.event, "actor": event.actor_username or "", "entity": event.entity}

    def one(match: re.Match[str]) -> str:
        name = match.group(1).removeprefix("record.")
        value = record.get(name, facts.get(name, ""))
        return "" if value is None else str(value)

    return _PLACE.sub(one, template)


KEYS = uuid.UUID("6d1f3a52-3c0e-4f55-9a43-5a7f0d1e2b11")  # the namespace of idempotency keys


def settle_id(delivery: plans.Delivery, event: Event) -> uuid.UUID:
    """The id a delivery is settled under (pure): the event's id, or -- with ``idempotency_key``
    declared -- one derived from the rendered key, so that events rendering the same key settle
    one delivery only (``{{ id }}-{{ version }}``: once per version of a record)."""
    template = delivery.decl.idempotency_key
    if template is None:
        return event.public_id
    return uuid.uuid5(KEYS, f"{delivery.consumer}\x00{render(template, event)}")


@dataclass
class Channels:
    """What deliveries need from the process: an HTTP session, secrets, the runner, the sender."""

    http: aiohttp.ClientSession | None = None
    webhook_secret: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    runner: Runner | None = None
    sender: Sender = log_sender
    nats: Publisher | None = None
    broker: brokers.Broker | None = None  # where ``nats`` connects at start (``brokers.broker``)

    async def deliver(self, conn: db.Connection, event: Event, delivery: plans.Delivery) -> None:
        if delivery.decl.handler is not None:
            await self._run(conn, event, DeliveryTarget(action=delivery.decl.handler))
        channel = delivery.channel
        if channel is EventChannel.AUDIT_LOG:
            await _audit(conn, event)
        elif channel is EventChannel.WEBHOOK:
            await self._webhook(event, delivery)
        elif channel is EventChannel.RELIABLE_EVENT:
            assert delivery.decl.target is not None  # validation requires it
            await self._run(conn, event, delivery.decl.target)
        elif channel is EventChannel.NOTIFICATION:
            await self._notify(conn, event, delivery.decl.notification)
        elif channel is EventChannel.PUBSUB and self.nats is not None:
            subject = delivery.topic if delivery.scope == "global" else f"{delivery.topic}.{event.tenant}"
            await self.nats(subject, json.dumps(event.message(), default=db.json_default).encode())
        elif channel is EventChannel.PUBSUB:
            await publish(conn, event, delivery)
        elif channel is EventChannel.WEBSOCKET:
            return  # the feed carries every delivered event
        else:
            raise RuntimeError(f"channel {channel} is not delivered")

    async def _run(self, conn: db.Connection, event: Event, target: DeliveryTarget) -> None:
        if self.runner is None:
            raise RuntimeError("no action runner (reliable_event, handler) is wired in this process")
        await self.runner(conn, event, target)

    async def _webhook(self, event: Event, delivery: plans.Delivery) -> None:
        decl = delivery.decl.webhook
        if decl is None:
            raise RuntimeError("a webhook delivery needs its webhook entry (url or url_from_config)")
        url = decl.url if decl.url is not None else self.config.get(decl.url_from_config or "")
        if not url:
            raise RuntimeError(f"config key {decl.url_from_config!r} of the webhook URL is not set")
        body = json.dumps(event.message(), default=db.json_default, separators=(",", ":"))
        now = datetime.now().astimezone()
        headers = {
            **decl.headers,
            "Content-Type": "application/json",
            "webhook-id": str(event.public_id),
            "webhook-timestamp": str(int(now.timestamp())),
        }
        if delivery.decl.idempotency_key is not None:
            headers["Idempotency-Key"] = render(delivery.decl.idempotency_key, event)
        if decl.sign:
            if not self.webhook_secret:
                raise RuntimeError("the webhook is declared sign: true but DAP_WEBHOOK_SECRET is not set")
            signer = standardwebhooks.Webhook(self.webhook_secret)
            headers["webhook-signature"] = signer.sign(str(event.public_id), now, body)
        if self.http is None:
            raise RuntimeError("no HTTP session for webhooks in this process")
        timeout = aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT)
        host = urllib.parse.urlsplit(url).netloc  # never the path or query: they may carry tokens
        with tracing.span(
            f"webhook {decl.method}", kind="client", attributes={"server.address": host}
        ) as span:
            tracing.inject(headers)  # the receiver may continue the trace (W3C traceparent)
            async with self.http.request(
                decl.method, url, data=body, headers=headers, timeout=timeout
            ) as resp:
                tracing.annotate(span, **{"http.response.status_code": resp.status})
                if not 200 <= resp.status < 300:
                    raise RuntimeError(f"webhook {url} answered {resp.status}")

    async def _notify(self, conn: db.Connection, event: Event, decl: NotificationDecl | None) -> None:
        if decl is None:
            raise RuntimeError("a notification delivery needs its notification entry")
        body = render(decl.template, event)
        subject = render(decl.subject, event) if decl.subject else None
        for username in await recipients(conn, event, decl):
            if decl.medium == "in_app":
                await conn.execute(
                    "INSERT INTO dap.notifications (tenant_id, username, event_id, entity, record_id, "
                    "event, subject, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
                    event.tenant,
                    username,
                    event.public_id,
                    event.entity,
                    event.record_id,
                    event.event,
                    subject,
                    body,
                )
            else:
                await self.sender(decl.medium, username, subject, body)


async def recipients(conn: db.Connection, event: Event, decl: NotificationDecl) -> list[str]:
    """The usernames ``to`` names: ``user:<name>``, ``field:<name>`` (the record's value),
    ``role:<name>`` (the workspace's users holding the role)."""
    out: list[str] = []
    record = event.payload.get("record") or {}
    for entry in decl.to:
        kind, _, name = entry.partition(":")
        if kind == "user":
            out.append(name)
        elif kind == "field" and record.get(name):
            out.append(str(record[name]))
        elif kind == "role":
            rows = await conn.fetch(
                "SELECT username FROM dap.users WHERE tenant_id = $1 AND $2 = ANY(roles) ORDER BY username",
                event.tenant,
                name,
            )
            out.extend(r["username"] for r in rows)
    return list(dict.fromkeys(out))


async def _audit(conn: db.Connection, event: Event) -> None:
    if event.record_id is None:
        return  # the audit trail is per record; a service action's event has none
    await conn.execute(
        auditing.INSERT,
        event.tenant,
        event.entity,
        event.record_id,
        f"event:{event.event}",
        event.actor_sub or "",
        event.actor_username or "",
        event.version,
        {},
        event.request_id,
    )


async def publish(conn: db.Connection, event: Event, delivery: plans.Delivery) -> None:
    """``NOTIFY`` the event's ids on its topic (delivered when the dispatcher's transaction commits)."""
    topic = delivery.topic or TOPIC
    note = {
        "id": str(event.public_id),
        "tenant": str(event.tenant),
        "entity": event.entity,
        "event": event.event,
        "record_id": str(event.record_id) if event.record_id else None,
    }
    await conn.execute("SELECT pg_notify($1, $2)", topic, json.dumps(note))


class _Nats:
    """A NATS connection as a :data:`Publisher` (``nats-py``, loaded only when configured)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def __call__(self, subject: str, body: bytes) -> None:
        await self.client.publish(subject, body)
        await self.client.flush(timeout=5)


async def nats_publisher(broker: brokers.Broker) -> Publisher:
    import nats  # only when a NATS server is configured

    client = await nats.connect(
        broker.url,
        user=broker.user,
        password=broker.password,
        connect_timeout=5,
        max_reconnect_attempts=-1,
    )
    return _Nats(client)


async def close_nats(publisher: Publisher | None) -> None:
    if isinstance(publisher, _Nats):
        await publisher.client.drain()
