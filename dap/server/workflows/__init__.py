"""dap.server.workflows — what an action does beyond a plain write: custom actions, state machines,
service actions and tracked async jobs.

Above documents (a transition is a write of the record, audited and cached like one) and below
web (which turns ``POST …/{id}/{action}`` into :func:`actions.run` and ``POST …/{service}/{action}``
into :func:`services.run`). The compiled, per-spec facts (which transition an action requests,
its params and conditions, the exposed services) live in ``dap.server.catalog.machines``; this
package applies them to a request::

    actions    one custom action or transition on one record, in one transaction
    services   one service action (no record), in one transaction; who may call it
    machines   whether a transition can run from the current state (pure)
    handlers   native handlers, registered by entry point (group ``dap.actions``)
    outbox     ``dap.outbox``: the events an action emits, written in its transaction
    jobs       ``dap.jobs``: ``call: async`` actions queued, claimed, leased, finished
    worker     the job worker loop of one process (runs jobs, delivers callbacks)
    callbacks  where a job's callback may go, its Standard Webhooks signature, its retries

Approval gates are not here yet (see docs/workflows.md). Modules load on first import (none is
imported here): the boot path needs ``outbox`` and ``jobs`` only.
"""

__all__ = ["actions", "callbacks", "handlers", "jobs", "machines", "outbox", "services", "worker"]
