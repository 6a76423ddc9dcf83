"""dap.server.workflows — what an action does beyond a plain write: custom actions, state machines.

Above documents (a transition is a write of the record, audited and cached like one) and below
web (which turns ``POST …/{id}/{action}`` into :func:`actions.run`). The compiled, per-spec facts
(which transition an action requests, its params and conditions) live in
``dap.server.catalog.machines``; this package applies them to a request::

    actions    one custom action or transition on one record, in one transaction
    machines   whether a transition can run from the current state (pure)
    handlers   native handlers, registered by entry point (group ``dap.actions``)
    outbox     ``dap.outbox``: the events an action emits, written in its transaction
    sidecars   actions run by the app process: the ``Invoker`` the bridge provides, its reply applied

Approval gates and tracked jobs are not here yet (see docs/workflows.md). Modules load on first
import (none is imported here): the boot path needs ``outbox`` only.
"""

__all__ = ["actions", "handlers", "machines", "outbox", "sidecars"]
