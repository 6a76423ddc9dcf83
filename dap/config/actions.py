"""Action declarations and the records an action carries.

The spec leaves IdempotencyDecl, ImplDecl, ParamsDecl, RateLimitSpec, UsesDecl and RetryDecl
undefined; their designs live here (see docs/decisions.md).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from dap.config.base import Duration, Expression, FieldName, Record
from dap.config.enums import ButtonStyle, CallMode, ProtocolType
from dap.config.fields import Field
from dap.config.sagas import SagaStep, check_saga


class ActionUIHint(Record):
    button_label: str | None = None
    confirm: str | None = None
    icon: str | None = None
    show_when: Expression | None = None
    style: ButtonStyle | None = None


class ConditionDecl(Record):
    """Canonical form ``script`` + ``message``; the older form is ``field`` + ``expression``."""

    script: Expression | None = None
    message: str | None = None
    field: FieldName | None = None
    expression: Expression | None = None

    @pydantic.model_validator(mode="after")
    def _one_form(self) -> ConditionDecl:
        canonical = self.script is not None
        older = self.expression is not None
        if canonical == older:
            raise ValueError(
                "a condition needs either script (with message) or the older field + expression form, "
                "not both"
            )
        return self


class RetryDecl(Record):
    """Designed: exponential backoff from ``backoff`` up to ``max_backoff``."""

    max_attempts: int = pydantic.Field(default=3, ge=0, le=100)
    backoff: Duration = "1s"
    max_backoff: Duration = "5m"
    multiplier: float = pydantic.Field(default=2.0, ge=1.0, le=10.0)


class CallbackDecl(Record):
    channel: Literal["webhook"]
    header: str | None = None
    url_from: Literal["header"] | None = None
    sign: bool = False
    retry: RetryDecl | None = None


class IdempotencyDecl(Record):
    """Designed: the request header carrying the key, how long keys are remembered, optional key fields."""

    header: str = "Idempotency-Key"
    ttl: Duration = "24h"
    fields: tuple[FieldName, ...] = ()


class ImplDecl(Record):
    """Designed: how an action is implemented."""

    type: Literal["native", "script", "sidecar", "saga"]
    handler: str | None = None
    script: str | None = None
    timeout: Duration | None = None
    steps: tuple[SagaStep, ...] = ()  # type saga: the ordered steps (dap.config.sagas)
    resolve_permission: str | None = None  # type saga: who may retry/skip/resolve a parked one

    @pydantic.model_validator(mode="after")
    def _saga(self) -> ImplDecl:
        check_saga(self)
        return self


class ParamsDecl(Record):
    """Designed: the action's input parameters, declared like fields."""

    fields: tuple[Field, ...] = ()


class RateLimitSpec(Record):
    """Designed: ``requests`` per ``per`` window with an optional burst, counted per ``key``."""

    requests: int = pydantic.Field(gt=0)
    per: Duration = "1m"
    burst: int | None = pydantic.Field(default=None, gt=0)
    key: Literal["principal", "tenant", "ip"] = "principal"


class UsesDecl(Record):
    """Designed: what an action may touch beyond its own entity (enforced with --workspace)."""

    services: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    datastores: tuple[str, ...] = ()
    config: tuple[str, ...] = ()


class Action(Record):
    name: FieldName
    description: str | None = None
    call: CallMode = CallMode.SYNC
    track: bool = False
    callback: CallbackDecl | None = None
    emits: str | None = None
    params: ParamsDecl | None = None
    conditions: tuple[ConditionDecl, ...] = ()
    impl: ImplDecl | None = None
    uses: UsesDecl | None = None
    idempotent: bool = False
    idempotency_key: IdempotencyDecl | None = None
    rate_limit: RateLimitSpec | None = None
    required_permission: str | None = None
    audit: bool = False
    disabled: bool = False
    expose: tuple[ProtocolType, ...] = ()
    public: bool = False
    challenge: bool = False
    ui: ActionUIHint | None = None

    @pydantic.model_validator(mode="after")
    def _track_needs_async(self) -> Action:
        if self.track and self.call is not CallMode.ASYNC:
            raise ValueError("track: true needs call: async (a tracked job runs in the background)")
        if self.impl is not None and self.impl.type == "saga" and not self.track:
            raise ValueError("a saga runs as a tracked job: declare call: async and track: true")
        return self
