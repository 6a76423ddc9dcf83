"""The manifest form of a saga: a service action whose ``impl`` is ``{type: saga, steps: [...]}``.

A saga is a declared kind of action (docs/decisions.md, "Issue 44"): an ordered list of steps,
each one call to a target -- a ``native`` handler, a ``sidecar`` action of the app process, an
``http`` call or a ``record`` operation -- with its ``compensation`` (another call of the same
forms, or the word ``none`` to say on purpose that nothing undoes it), a ``timeout``, a retry
limit and an optional ``status`` check asked when the step's outcome is unknown. The engine is
``dap.server.workflows.sagas``; everything checked here is checked by ``dap validate`` with the
file and the path of the offending key.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from dap.config.base import Duration, Identifier, Record

TARGETS = ("native", "sidecar", "http", "record")
ACTION_PATH = r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$"


class HttpCall(Record):
    """An HTTP call; the engine sends ``Idempotency-Key`` and a JSON body (params, saga, step)."""

    url: str = pydantic.Field(pattern=r"^https?://")
    method: Literal["POST", "PUT", "PATCH", "DELETE", "GET"] = "POST"


class RecordOp(Record):
    """A record operation in the engine's own transaction: ``create`` a record of ``entity`` from
    the saga's params (``values``: field → param name), or ``delete`` the one a step created
    (``of``: that step's name; the usual compensation of a create)."""

    entity: str = pydantic.Field(pattern=r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$")
    op: Literal["create", "delete"]
    values: dict[str, str] = pydantic.Field(default_factory=dict)
    of: Identifier | None = None

    @pydantic.model_validator(mode="after")
    def _shape(self) -> RecordOp:
        if self.op == "delete" and self.values:
            raise ValueError("a record delete takes no values (it deletes the record a step created)")
        if self.op == "create" and self.of is not None:
            raise ValueError("'of' belongs to a record delete (the step whose record it deletes)")
        return self


class SagaCall(Record):
    """One call: exactly one of ``native``, ``sidecar``, ``http``, ``record``."""

    native: str | None = None  # a handler of the entry-point group dap.actions
    sidecar: str | None = pydantic.Field(default=None, pattern=ACTION_PATH)  # module/name/action
    http: HttpCall | None = None
    record: RecordOp | None = None

    @pydantic.model_validator(mode="after")
    def _one_target(self) -> SagaCall:
        given = [t for t in TARGETS if getattr(self, t) is not None]
        if len(given) != 1:
            raise ValueError(
                f"a saga call names exactly one target of {', '.join(TARGETS)}; "
                + (f"this one names {', '.join(given)}" if given else "this one names none")
            )
        return self

    @property
    def kind(self) -> str:
        return next(t for t in TARGETS if getattr(self, t) is not None)


class SagaStep(SagaCall):
    """One step: its call, what undoes it, how long one attempt may take and how often to retry."""

    name: Identifier
    compensation: Literal["none"] | SagaCall = pydantic.Field(
        description="the call that undoes this step, or 'none' when nothing needs undoing"
    )
    timeout: Duration = "30s"
    retries: int = pydantic.Field(default=3, ge=0, le=100)
    status: SagaCall | None = None  # asked when an attempt's outcome is unknown

    @pydantic.model_validator(mode="after")
    def _status_target(self) -> SagaStep:
        if self.status is not None and self.status.kind in ("native", "record"):
            raise ValueError(
                "a status check is an http or sidecar call: a native or record step commits with the "
                "saga's progress, so its outcome is never unknown"
            )
        return self


def check_saga(impl: Any) -> None:
    """The rules of ``impl: {type: saga}`` on top of the records' own (called by ``ImplDecl``)."""
    steps: tuple[SagaStep, ...] = impl.steps
    if impl.type != "saga":
        if steps:
            raise ValueError("steps belong to impl type saga")
        return
    if not steps:
        raise ValueError("a saga needs at least one step")
    names = [s.name for s in steps]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"saga step names must be unique: {', '.join(doubled)} repeated")
    for index, step in enumerate(steps):
        for call in (step, step.compensation):
            if isinstance(call, SagaCall) and call.record is not None and call.record.op == "delete":
                earlier = names[: index + 1]
                if call.record.of not in earlier:
                    raise ValueError(
                        f"step {step.name!r}: a record delete names in 'of' this or an earlier step "
                        f"that creates a record ({', '.join(earlier)})"
                    )
