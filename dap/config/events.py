"""Event declarations and their delivery.

PayloadDecl, PublishDecl, NotificationDecl and WebhookDeliveryDecl are designed here. An event's
``type`` (sync or async) is derived from its name when not set: names starting ``async_`` or
``async.`` are async, every other name is sync.
"""

from __future__ import annotations

import warnings
from typing import Literal

import pydantic

from dap.config.actions import RetryDecl
from dap.config.base import DottedEntityRef, FieldName, Record
from dap.config.enums import CallMode, EventChannel


class PayloadDecl(Record):
    """Designed: which record fields an event carries (empty = the whole record)."""

    fields: tuple[FieldName, ...] = ()
    include_changes: bool = False


class PublishDecl(Record):
    """Designed: the topic an event is published on, and how far it reaches."""

    topic: str | None = None
    scope: Literal["workspace", "global"] = "workspace"


class DeliveryTarget(Record):
    action: FieldName | None = None
    resource: DottedEntityRef | None = None
    scope: str | None = None


class NotificationDecl(Record):
    """Designed: a templated message to roles, users or the principal stored in a field."""

    template: str
    to: tuple[str, ...] = pydantic.Field(min_length=1, description="role:<name>, user:<name> or field:<name>")
    medium: Literal["email", "in_app", "sms"] = "in_app"
    subject: str | None = None


class WebhookDeliveryDecl(Record):
    """Designed: an outgoing HTTP call; the URL is literal or read from a config key."""

    url: str | None = None
    url_from_config: str | None = None
    method: Literal["POST", "PUT"] = "POST"
    sign: bool = False
    headers: dict[str, str] = pydantic.Field(default_factory=dict)

    @pydantic.model_validator(mode="after")
    def _one_url(self) -> WebhookDeliveryDecl:
        if (self.url is None) == (self.url_from_config is None):
            raise ValueError("a webhook needs exactly one of url or url_from_config")
        return self


class EventDeliveryDecl(Record):
    channel: EventChannel
    handler: FieldName | None = None
    job: FieldName | None = None
    target: DeliveryTarget | None = None
    notification: NotificationDecl | None = None
    webhook: WebhookDeliveryDecl | None = None
    retry: RetryDecl | None = None
    dead_letter: DeliveryTarget | None = None
    idempotency_key: str | None = None

    @pydantic.model_validator(mode="after")
    def _queue_not_delivered(self) -> EventDeliveryDecl:
        if self.channel is EventChannel.QUEUE:
            warnings.warn(
                "channel queue is declared but not delivered by this server (no queue runner yet); "
                "deliver through reliable_event or webhook, or keep it as documentation",
                UserWarning,
                stacklevel=2,
            )
        return self


class EventDecl(Record):
    name: str = pydantic.Field(pattern=r"^[a-z][a-z0-9_.]*$")
    description: str | None = None
    type: CallMode | None = None
    payload: PayloadDecl | None = None
    publish: PublishDecl | None = None
    deliver: tuple[EventDeliveryDecl, ...] = ()

    @property
    def effective_type(self) -> CallMode:
        if self.type is not None:
            return self.type
        async_name = self.name.startswith(("async_", "async."))
        return CallMode.ASYNC if async_name else CallMode.SYNC


class DeliveryDecl(Record):
    """Deprecated: the older per-entity delivery list; use ``events[].deliver`` instead."""

    event: str
    channel: EventChannel | None = None
    reliable_event: bool = False
    websocket: bool = False

    @pydantic.model_validator(mode="after")
    def _deprecated(self) -> DeliveryDecl:
        warnings.warn(
            "DeliveryDecl is deprecated: declare deliver entries on the event instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self
