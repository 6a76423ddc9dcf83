"""Rules on what an entity does: actions, events and their deliveries, the state machine and approvals."""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import manifests as m
from dap.config.enums import (
    ApprovalStepMode,
    EventChannel,
)
from dap.config.errors import Problem
from dap.config.events import DeliveryTarget
from dap.config.sagas import SagaCall, SagaStep
from dap.config.specs import Spec
from dap.config.validation import locating


def action_and_event_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        es = entity.spec
        for name in locating.duplicates(a.name for a in es.actions):
            yield locating.at(spec, entity, "spec.actions", f"action {name!r} is declared twice")
        for name in locating.duplicates(e.name for e in es.events):
            yield locating.at(spec, entity, "spec.events", f"event {name!r} is declared twice")
        for i, action in enumerate(es.actions):
            if action.public:
                yield locating.at(
                    spec,
                    entity,
                    f"spec.actions[{i}].public",
                    "public: true is allowed on service actions only (anonymous callers of a Service's "
                    "action); an entity's actions always need a caller: remove public or move the action "
                    "to a Service",
                )
            if action.impl is not None and action.impl.type == "saga":
                yield locating.at(
                    spec,
                    entity,
                    f"spec.actions[{i}].impl.type",
                    "a saga is a service action (it spans systems, not one record): move it to a Service",
                )
            if action.emits is not None and es.event(action.emits) is None:
                yield locating.at(
                    spec,
                    entity,
                    f"spec.actions[{i}].emits",
                    f"event {action.emits!r} is not declared in spec.events of {entity.key}",
                )
        actions = locating.entity_actions(es)
        for i, event in enumerate(es.events):
            for j, delivery in enumerate(event.deliver):
                path = f"spec.events[{i}].deliver[{j}]"
                for key in ("handler", "job"):
                    name = getattr(delivery, key)
                    if name is not None and name not in actions:
                        yield locating.at(
                            spec, entity, f"{path}.{key}", f"action {name!r} is not declared on {entity.key}"
                        )
                if delivery.channel is EventChannel.RELIABLE_EVENT:
                    yield from _reliable_target(spec, entity, path, delivery.target)
    yield from _service_rules(spec)


def _service_rules(spec: Spec) -> Iterator[Problem]:
    for service in spec.services.values():
        for name in locating.duplicates(a.name for a in service.spec.actions):
            yield locating.at(spec, service, "spec.actions", f"action {name!r} is declared twice")
        if service.key in spec.entities:
            yield locating.at(
                spec,
                service,
                "metadata.name",
                f"{service.key} is also an entity: POST /{{ws}}/api/{service.key}/... could mean either; "
                "rename the service",
            )
        for i, action in enumerate(service.spec.actions):
            if action.impl is not None and action.impl.type == "saga":
                yield from _saga_records(spec, service, f"spec.actions[{i}].impl", action.impl.steps)


def _saga_records(
    spec: Spec, service: m.ServiceManifest, path: str, steps: tuple[SagaStep, ...]
) -> Iterator[Problem]:
    """A saga's record operations name declared entities."""
    for j, step in enumerate(steps):
        at = f"{path}.steps[{j}]"
        for where, call in ((at, step), (f"{at}.compensation", step.compensation)):
            if isinstance(call, SagaCall) and call.record is not None:
                entity = call.record.entity
                if spec.resolve_entity(entity, service.metadata.module) is None:
                    message = f"{entity!r} is not a declared entity"
                    yield from locating.undeclared_entity(
                        spec, service, f"{where}.record.entity", entity, message
                    )


def _reliable_target(
    spec: Spec, entity: m.EntityManifest, path: str, target: DeliveryTarget | None
) -> Iterator[Problem]:
    resource = target.resource if target is not None else None
    action = target.action if target is not None else None
    if resource is None or action is None:
        yield locating.at(
            spec, entity, f"{path}.target", "reliable_event needs target.resource (module.entity) and action"
        )
        return
    receiver = spec.resolve_entity(resource, entity.metadata.module)
    if receiver is None:
        yield from locating.undeclared_entity(
            spec, entity, f"{path}.target.resource", resource, f"{resource!r} is not a declared entity"
        )
    elif action not in locating.entity_actions(receiver.spec):
        yield locating.at(spec, entity, f"{path}.target.action", f"{receiver.key} has no action {action!r}")


def state_machine_rules(spec: Spec) -> Iterator[Problem]:
    for entity in spec.entities.values():
        machine = entity.spec.state_machine
        if machine is None:
            continue
        states = set(machine.states)
        if entity.spec.field("state") is not None:  # the server keeps the current state there
            yield locating.at(
                spec,
                entity,
                "spec.fields",
                "a field named 'state' cannot sit beside a state_machine: the current state is the "
                "record's 'state' field; rename the field",
            )
        for name in locating.duplicates(machine.states):
            yield locating.at(spec, entity, "spec.state_machine.states", f"state {name!r} is listed twice")
        if machine.initial is not None and machine.initial not in states:
            yield locating.at(
                spec, entity, "spec.state_machine.initial", f"{machine.initial!r} is not a declared state"
            )
        actions = locating.entity_actions(entity.spec)
        for i, transition in enumerate(machine.transitions):
            path = f"spec.state_machine.transitions[{i}]"
            for origin in transition.origins:
                if origin not in states:
                    yield locating.at(spec, entity, f"{path}.from", f"{origin!r} is not a declared state")
            if transition.to not in states:
                yield locating.at(spec, entity, f"{path}.to", f"{transition.to!r} is not a declared state")
            if transition.action is not None and transition.action not in actions:
                yield locating.at(
                    spec, entity, f"{path}.action", f"action {transition.action!r} is not declared"
                )
            approval = transition.approval
            if approval is None:
                continue
            if approval.on_reject is not None and approval.on_reject.to not in states:
                yield locating.at(
                    spec,
                    entity,
                    f"{path}.approval.on_reject.to",
                    f"{approval.on_reject.to!r} is not a declared state",
                )
            for j, step in enumerate(approval.steps):
                if step.mode is ApprovalStepMode.ALL:
                    yield locating.at(
                        spec,
                        entity,
                        f"{path}.approval.steps[{j}].mode",
                        "mode 'all' is not supported; use mode: any with approvers: N, or mode: sequential",
                    )
            for name in locating.duplicates(s.name for s in approval.steps):
                yield locating.at(
                    spec, entity, f"{path}.approval.steps", f"approval step {name!r} is declared twice"
                )
