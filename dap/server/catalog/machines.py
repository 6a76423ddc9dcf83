"""State machines and custom actions of each entity, compiled once per spec. Pure.

The current state of an entity with a ``state_machine`` is an ordinary column named ``state``:
:func:`with_state` adds a read-only ``enum`` field of that name (its values the declared states,
its default the ``initial`` state) to the entity's fields before the tables are described, so the
migration planner adds the column like any field's, records show it, list filters and ``sort``
accept it, and OpenAPI and the UI metadata describe it, with no path of its own. The config
validation refuses an entity that declares a field ``state`` beside a state machine.

:func:`compile_actions` gives, per action name that a record action path may name beyond the
standard ones, an :class:`ActionPlan`: the declaration (if any), the transition it requests (a
transition without ``action`` is requested through an action named like the transition), its
params as fields and its conditions compiled like the standard actions' guards
(``plans.Condition``), so a request pays dictionary lookups. ``dap.server.workflows`` runs them.

A transition that declares ``approval`` carries its :class:`Gate`: the steps with ``when``
compiled, the escalation delay in seconds and ``on_reject.to`` (``workflows.approvals`` runs it).

:func:`compile_service` does the same for a ``Service`` manifest's actions (no record, no
transition): a :class:`ServicePlan` per service that opts into REST with an ``expose`` entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dap.config import durations
from dap.config.actions import Action
from dap.config.entities import ApprovalSpec, EntitySpec, StateMachine
from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.config.platform import ServiceSpec
from dap.server.catalog import checking, plans

STATE = "state"  # the field (and column) holding the current state


def initial_of(machine: StateMachine) -> str:
    """The state a new record starts in: ``initial``, else the first declared state."""
    return machine.initial or machine.states[0]


def state_field(machine: StateMachine) -> Field:
    return Field(
        name=STATE,
        type=FieldType.ENUM,
        enum_values=machine.states,
        read_only=True,  # moved only by transitions, never by a body
        default=initial_of(machine),
        index=True,  # lists filter by state more than by anything else
        description="Current state of the state machine; moved by its transitions' actions.",
    )


def with_state(spec: EntitySpec) -> EntitySpec:
    """``spec`` with the ``state`` field of its state machine (unchanged without one)."""
    machine = spec.state_machine
    if machine is None or spec.field(STATE) is not None:
        return spec
    return spec.model_copy(update={"fields": (*spec.fields, state_field(machine))})


@dataclass(frozen=True)
class Step:
    """One step of an approval gate, as the votes on it see it."""

    name: str
    title: str
    sequential: bool  # mode sequential: the k-th vote needs roles[min(k, len - 1)]
    approvers: int  # quorum of distinct eligible principals
    roles: tuple[str, ...]
    permission: str | None
    display_fields: tuple[str, ...]
    when: checking.Compiled | None
    escalate_after: float | None  # seconds after the step starts
    escalate_to: tuple[str, ...]
    notify: bool


@dataclass(frozen=True)
class Gate:
    steps: tuple[Step, ...]
    reject_to: str | None
    self_approval: bool


def compile_gate(spec: ApprovalSpec) -> Gate:
    steps = tuple(
        Step(
            name=s.name,
            title=s.title or s.name,
            sequential=s.mode.value == "sequential",
            approvers=s.approvers,
            roles=s.roles,
            permission=s.permission,
            display_fields=s.display_fields,
            when=checking.compile_expression(s.when) if s.when else None,
            escalate_after=durations.parse(s.escalation.after).total_seconds() if s.escalation else None,
            escalate_to=s.escalation.to_roles if s.escalation else (),
            notify=s.escalation.notify if s.escalation else False,
        )
        for s in spec.steps
    )
    return Gate(steps, spec.on_reject.to if spec.on_reject else None, spec.allow_self_approval)


@dataclass(frozen=True)
class Move:
    """One transition as a request sees it."""

    name: str
    origins: tuple[str, ...]
    to: str
    initial: str  # the state a record without one (created before the machine) counts as
    gate: Gate | None = None  # its approval gate: requesting it opens an approval, it does not move

    @property
    def gated(self) -> bool:
        return self.gate is not None


@dataclass(frozen=True)
class ActionPlan:
    name: str
    declared: Action | None
    move: Move | None
    params: Mapping[str, Field] = field(default_factory=dict)
    conditions: plans.Plan = plans.NOTHING  # only ``conditions[name]`` is set


_STANDARD = frozenset({"list", "find", "create", "update", "delete", "submit", "cancel"})


def _conditions(action: Action) -> plans.Plan:
    if not action.conditions:
        return plans.NOTHING
    compiled = tuple(
        plans.Condition(
            checking.compile_expression(c.script or c.expression or ""),
            c.message or f"the condition {c.script or c.expression} of {action.name} is not met",
            c.field or action.name,
        )
        for c in action.conditions
    )
    return plans.Plan(plans.NOTHING.record, conditions=MappingProxyType({action.name: compiled}))


def compile_actions(spec: EntitySpec) -> Mapping[str, ActionPlan]:
    """Every custom action and transition of ``spec`` by the action name a request uses."""
    moves: dict[str, Move] = {}
    machine = spec.state_machine
    if machine is not None:
        initial = initial_of(machine)
        for t in machine.transitions:
            gate = compile_gate(t.approval) if t.approval is not None else None
            moves.setdefault(t.action or t.name, Move(t.name, t.origins, t.to, initial, gate))
    out: dict[str, ActionPlan] = {}
    for a in spec.actions:
        if a.name in _STANDARD:
            continue
        out[a.name] = dataclasses.replace(_plan(a), move=moves.get(a.name))
    for name, move in moves.items():
        if name not in out and name not in _STANDARD:
            out[name] = ActionPlan(name, None, move)
    return MappingProxyType(out)


def allowed_from(plans_: Mapping[str, ActionPlan], state: str) -> list[str]:
    """The actions whose transition can run from ``state`` (for the UI and for error messages)."""
    return sorted(n for n, p in plans_.items() if p.move is not None and state in p.move.origins)


@dataclass(frozen=True)
class ServicePlan:
    """A service reachable over REST (``POST /{ws}/api/{module}/{service}/{action}``)."""

    key: str  # module/name
    module: str
    name: str
    title: str
    description: str | None
    actions: Mapping[str, ActionPlan]  # by name; disabled ones included (answered 404)


def _plan(action: Action) -> ActionPlan:
    params = {f.name: f for f in action.params.fields if not f.removed} if action.params else {}
    return ActionPlan(action.name, action, None, MappingProxyType(params), _conditions(action))


def compile_service(key: str, spec: ServiceSpec, protocol: str = "rest") -> ServicePlan | None:
    """The plan of a service over ``protocol`` (``rest``, ``grpc``, ``ws``); ``None`` when no
    enabled ``expose`` entry of that type opens it."""
    if "/" not in key or not any(e.type == protocol and e.enabled for e in spec.expose):
        return None
    module, name = key.split("/", 1)
    return ServicePlan(
        key,
        module,
        name,
        spec.title or name.replace("_", " ").capitalize(),
        spec.description,
        MappingProxyType({a.name: _plan(a) for a in spec.actions}),
    )
