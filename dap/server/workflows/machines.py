"""Whether a transition can run from a record's current state. Pure.

A record created before its entity declared a state machine has no state (the column was added
empty); it counts as being in the machine's initial state, so the first transition from there
works instead of leaving such records stuck.
"""

from __future__ import annotations

from collections.abc import Mapping

from dap.server import errors
from dap.server.catalog import machines

NOT_ALLOWED = "SVC.STATE.TRANSITION_NOT_ALLOWED"


def current(move: machines.Move, stored: str | None) -> str:
    return stored if stored is not None else move.initial


def check(
    action: str, move: machines.Move, stored: str | None, everything: Mapping[str, machines.ActionPlan]
) -> str:
    """The state ``action`` moves a record in ``stored`` to; 409 when it cannot run from there."""
    now = current(move, stored)
    if now not in move.origins:
        others = machines.allowed_from(everything, now)
        hint = f"; from {now!r} you can: {', '.join(others)}" if others else f"; {now!r} has no way out"
        raise errors.Conflict(
            f"{action} ({move.name}) runs only from {', '.join(map(repr, move.origins))}, "
            f"and this record is {now!r}{hint}",
            code=NOT_ALLOWED,
            errors=[
                errors.FieldProblem(machines.STATE, f"is {now!r}; {action} needs one of {list(move.origins)}")
            ],
        )
    return move.to
