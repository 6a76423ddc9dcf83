"""The Entity manifest's spec and its entity-level declarations.

Approval gates, the state machine and the row-scope records (assignments, create scope, filters)
live here because each only makes sense against one entity's fields and states.
"""

from __future__ import annotations

import warnings
from typing import Literal

import pydantic

from dap.config.actions import Action
from dap.config.base import DottedEntityRef, Duration, Expression, FieldName, Identifier, Record
from dap.config.enums import (
    ApprovalStepMode,
    Characteristic,
    FieldType,
    FilterFrom,
    FilterOp,
    FilterType,
    ProtocolType,
    StandardAction,
)
from dap.config.events import DeliveryDecl, EventDecl
from dap.config.fields import CacheSpec, ExtendStorage, Field

# Conventional names of the transaction date when a backdate policy names no date_field.
TRANSACTION_DATES = ("posting_date", "transaction_date", "date")


class EntityAuth(Record):
    required: bool
    strategies: tuple[str, ...] = ()


class ExposeConfig(Record):
    type: ProtocolType
    actions: tuple[Literal["list", "find", "create", "update", "delete"], ...] = ()
    enabled: bool = True

    def allows(self, action: StandardAction | str) -> bool:
        """Whether this entry opens ``action`` (an empty list opens all five REST actions)."""
        return self.enabled and (not self.actions or str(action) in self.actions)


class AssignmentDecl(Record):
    dimension: Identifier
    field: FieldName
    principal_field: FieldName


class CreateScopeSpec(Record):
    field: FieldName
    ref_field: FieldName
    via: DottedEntityRef
    via_field: FieldName
    from_: Literal["record"] | None = pydantic.Field(default=None, alias="from")


class BackdatePolicy(Record):
    max_days_back: int = pydantic.Field(ge=0)
    override_permission: str | None = None
    max_days_forward: int | None = pydantic.Field(default=None, ge=0)
    date_field: FieldName | None = None


class SummarySum(Record):
    """One summed field of a summary: ``add`` minus ``subtract`` (source field names), per row."""

    field: FieldName
    add: FieldName | None = None
    subtract: FieldName | None = None


class SummaryDecl(Record):
    """What a ``characteristic: summary`` entity aggregates (issue 43): the submitted documents of
    ``source`` (a lifecycle entity; the rows of its child field ``lines`` when given), grouped by
    ``group_by`` (field names present on the summed rows and on the summary), their ``sum``s added
    on submit and taken away on cancel by the engine, in the move's transaction."""

    source: DottedEntityRef
    lines: FieldName | None = None
    group_by: tuple[FieldName, ...] = pydantic.Field(min_length=1)
    sum: tuple[SummarySum, ...] = pydantic.Field(min_length=1)


class ArchiveDecl(Record):
    """Issue 43: submitted or cancelled documents dated in a closed period and older than ``after``
    leave the hot table for ``dap.archive``, where they are kept ``retain`` (no delete before)."""

    after: Duration
    retain: Duration


class FilterSpec(Record):
    field: FieldName
    label: str | None = None
    type: FilterType | None = None
    op: FilterOp = FilterOp.EQ
    value: str | int | float | bool | None = None
    default: str | int | float | bool | None = None
    from_: FilterFrom | None = pydantic.Field(default=None, alias="from")
    attr: str | None = None
    param: str | None = None
    via: DottedEntityRef | None = None
    via_field: FieldName | None = None
    all_label: str = "(ALL)"
    show_all: bool = True

    @pydantic.model_validator(mode="after")
    def _session_needs_attr(self) -> FilterSpec:
        if self.from_ is FilterFrom.SESSION and not self.attr:
            raise ValueError(
                "a filter with from: session needs attr (principal_id, username, workspace, ...)"
            )
        return self


class StepEscalation(Record):
    """Designed: after ``after`` without a decision, the step is offered to ``to_roles`` as well."""

    after: Duration
    to_roles: tuple[str, ...] = ()
    notify: bool = True


class ApprovalStep(Record):
    name: str = pydantic.Field(pattern=r"^[a-z][a-z0-9-]*$")
    title: str | None = None
    description: str | None = None
    mode: ApprovalStepMode = ApprovalStepMode.ANY
    approvers: int = pydantic.Field(default=1, ge=1)
    roles: tuple[str, ...] = ()
    permission: str | None = None
    display_fields: tuple[FieldName, ...] = ()
    when: Expression | None = None
    escalation: StepEscalation | None = None


class ApprovalReject(Record):
    to: Identifier


class ApprovalSpec(Record):
    steps: tuple[ApprovalStep, ...] = pydantic.Field(min_length=1)
    on_reject: ApprovalReject | None = None
    # the requester of a gated transition may vote on it only when this is true (issue 11)
    allow_self_approval: bool = False


class Transition(Record):
    name: Identifier
    from_: Identifier | tuple[Identifier, ...] = pydantic.Field(alias="from")
    to: Identifier
    action: FieldName | None = None
    approval: ApprovalSpec | None = None

    @property
    def origins(self) -> tuple[str, ...]:
        return (self.from_,) if isinstance(self.from_, str) else self.from_


class StateMachine(Record):
    states: tuple[Identifier, ...] = pydantic.Field(min_length=1)
    initial: Identifier | None = None
    transitions: tuple[Transition, ...] = ()


class EntitySpec(Record):
    title: str | None = None
    description: str | None = None
    characteristic: Characteristic = Characteristic.MASTER
    lifecycle: bool = False
    fields: tuple[Field, ...] = ()
    actions: tuple[Action, ...] = ()
    events: tuple[EventDecl, ...] = ()
    deliveries: tuple[DeliveryDecl, ...] = pydantic.Field(default=(), description="deprecated; use events")
    state_machine: StateMachine | None = None
    auth: EntityAuth | None = None
    expose: tuple[ExposeConfig, ...] = ()
    assignments: tuple[AssignmentDecl, ...] = ()
    create_scope: CreateScopeSpec | None = None
    backdate: BackdatePolicy | None = None
    summary: SummaryDecl | None = None
    archive: ArchiveDecl | None = None
    cache: CacheSpec | None = None
    filters: tuple[FilterSpec, ...] = ()
    fixed_filters: tuple[FilterSpec, ...] = ()
    extends: ExtendStorage | None = None

    @pydantic.model_validator(mode="after")
    def _guarded_display_fields(self) -> EntitySpec:
        """A step's ``display_fields`` naming a field with a ``required_permission``: the inbox
        shows it only to voters who hold that permission (as a read does), so say so."""
        guarded = {f.name: f.required_permission for f in self.fields if f.required_permission}
        for t in self.state_machine.transitions if self.state_machine else ():
            for step in t.approval.steps if t.approval else ():
                for name in step.display_fields:
                    if name in guarded:
                        warnings.warn(
                            f"transition {t.name!r} step {step.name!r} displays {name!r}, which needs "
                            f"the permission {guarded[name]}: the inbox hides it from voters without "
                            "it; grant it to the step's voters or leave it out of display_fields",
                            UserWarning,
                            stacklevel=2,
                        )
        return self

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def action(self, name: str) -> Action | None:
        return next((a for a in self.actions if a.name == name), None)

    def event(self, name: str) -> EventDecl | None:
        return next((e for e in self.events if e.name == name), None)

    def transaction_date_field(self) -> Field | None:
        """The field a backdate policy checks: ``backdate.date_field``, else the first date field named
        posting_date, transaction_date or date (in that order)."""
        declared = self.backdate.date_field if self.backdate is not None else None
        names = (declared,) if declared is not None else TRANSACTION_DATES
        for name in names:
            f = self.field(name)
            if f is not None and not f.removed and f.type in (FieldType.DATE, FieldType.DATETIME):
                return f
        return None

    def rest(self) -> ExposeConfig | None:
        """The REST expose entry, if the entity opted in."""
        return next((e for e in self.expose if e.type is ProtocolType.REST and e.enabled), None)

    @property
    def stored_fields(self) -> tuple[Field, ...]:
        """Fields with a column of their own (not tombstoned, not computed-only children)."""
        return tuple(f for f in self.fields if not f.removed)
