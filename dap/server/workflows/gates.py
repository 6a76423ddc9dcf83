"""The rules of an approval gate, decided on plain values. Pure.

Who may vote on a step (:func:`refusal`), which roles the step needs now (:func:`roles_now`: in
``sequential`` mode the k-th vote needs ``roles[min(k, len - 1)]``), what a vote is tied to
(:func:`basis`: the step's display fields, or the record's version when it declares none) and
which step runs next (:func:`next_step`: ``when`` evaluated as the step starts, skipped steps
named). ``workflows.approvals`` applies them in a transaction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dap.server.catalog import checking, machines

# who voted as the escalation loop, in the audit trail
SYSTEM_SUB = "dap"
SYSTEM_USERNAME = "dap-escalation"


def roles_now(step: machines.Step, votes: int) -> tuple[str, ...]:
    """The roles that may cast the next vote of ``step`` after ``votes`` approvals (empty: any)."""
    if not step.sequential or len(step.roles) <= 1:
        return step.roles
    return (step.roles[min(votes, len(step.roles) - 1)],)


@dataclass(frozen=True)
class Voter:
    sub: str
    roles: tuple[str, ...]


def refusal(
    step: machines.Step,
    voter: Voter,
    *,
    votes: int,
    escalated: bool,
    requester: str,
    self_approval: bool,
    allows: Callable[[tuple[str, ...], str], bool],
) -> str | None:
    """Why ``voter`` may not vote on ``step`` now; ``None`` when they may.

    Eligible: holds one of the roles the step needs now (any role when it names none) and its
    ``permission`` (when declared); or, once the step escalated, one of ``escalation.to_roles``.
    The requester is refused unless the gate allows self-approval.
    """
    if voter.sub == requester and not self_approval:
        return "you requested this transition, and this gate does not allow approving your own request"
    needed = roles_now(step, votes)
    by_role = not needed or any(r in voter.roles for r in needed)
    by_permission = step.permission is None or allows(voter.roles, step.permission)
    if by_role and by_permission:
        return None
    if escalated and any(r in voter.roles for r in step.escalate_to):
        return None
    wants = []
    if needed:
        wants.append(f"one of the roles {', '.join(needed)}")
    if step.permission is not None:
        wants.append(f"the permission {step.permission}")
    also = (
        f" (or, as it escalated, one of {', '.join(step.escalate_to)})"
        if escalated and step.escalate_to
        else ""
    )
    return f"step {step.name!r} needs {' and '.join(wants)}{also}"


def basis(step: machines.Step, values: Mapping[str, Any]) -> str:
    """What votes on ``step`` are tied to: a digest of its display fields, else of the version."""
    shown = (
        {f: values.get(f) for f in step.display_fields}
        if step.display_fields
        else {"version": values["version"]}
    )
    text = json.dumps(shown, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Next:
    index: int | None  # the step that starts; None: every step is done
    skipped: tuple[str, ...]  # steps whose ``when`` was false, in order


def next_step(steps: Sequence[machines.Step], start: int, ctx: Mapping[str, Any], now: dt.datetime) -> Next:
    """The first step from ``start`` whose ``when`` holds on ``ctx`` (the record, ``session``)."""
    skipped: list[str] = []
    for index in range(start, len(steps)):
        step = steps[index]
        if step.when is None or checking.condition(step.when, ctx, now):
            return Next(index, tuple(skipped))
        skipped.append(step.name)
    return Next(None, tuple(skipped))
