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
    approvals  approval gates: opening one on a gated transition; ``approvals_schema``: their tables
    approvals_flow  a vote (approve or reject) in one transaction: quorum, steps, the transition
    gates      who may vote, what a vote is tied to, which step runs next (pure)
    inbox      the pending approvals a principal may vote on, across entities
    granting   grant requests between apps (``dap.app_grants``): asked on deployment, decided by the owner
    escalations  ``escalation.after``: the due escalations fired once, by a loop in each server
    jobs       ``dap.jobs``: ``call: async`` actions queued, claimed, leased, finished
    worker     the job worker loop of one process (runs jobs, delivers callbacks)
    callbacks  where a job's callback may go, its Standard Webhooks signature, its retries
    sagas      the saga engine: ``impl: {type: saga}`` actions run step by step, resumed after a crash
    saga_drive one claimed saga driven to its end or its parking (forward, status, compensation)
    saga_steps one call of a step to its target (native, app process, HTTP, record) and its outcome
    saga_store ``dap.sagas`` and ``dap.saga_log``: a saga's durable progress and timeline
    saga_decisions  a person's retry / skip / resolve of a parked saga; a saga's view
    sidecars   actions run by the app process: the ``Invoker`` the bridge provides, its reply applied
    recording  a record's create and update, the one pipeline REST and the seed loader share
    operations the entity verbs and record actions, protocol-neutral: REST and gRPC adapt them
    periods    accounting periods managed: create, start closing, close, reopen, with the audit trail
    calendars  a workspace's declared calendar: its periods created up to today, idempotently
    acting     custom, async and service actions and their jobs, protocol-neutral: REST, gRPC, ws
    filters    a list's query string (filters, sort, limit, fields) as a ``ListQuery`` (pure)
    watching   an entity's delivered events as one caller may see them (websocket, gRPC Watch)
    seeds      seed files (YAML, CSV) read into rows that know their file, line and fields (pure)
    csvdialect dap's one CSV dialect (the UI's export, imports, CSV seeds): strict reading, the formula guard
    seeding    seed rows loaded through the API's rules, in one transaction, idempotent
    seeding_steps  a seed row's ``_actions`` and ``_votes``, through the operations of their routes
    seeding_rows   what a row is checked for before it writes: cells typed, verbs exposed, not stale (pure)
    seeding_users  seeded password accounts (``entity: users``), so a demo's people can sign in
    seeding_periods  seeded closes of periods (``entity: periods``), after the rows dated in them

Modules load on first import (none is imported here): the boot path needs ``approvals_schema``,
``granting`` and ``jobs`` (their tables) only. The events an action emits are written by
``dap.server.events.outbox``.
"""

__all__ = [
    "acting",
    "actions",
    "approvals",
    "approvals_flow",
    "approvals_schema",
    "calendars",
    "callbacks",
    "csvdialect",
    "escalations",
    "filters",
    "gates",
    "granting",
    "handlers",
    "inbox",
    "jobs",
    "machines",
    "operations",
    "periods",
    "recording",
    "saga_decisions",
    "saga_drive",
    "saga_steps",
    "saga_store",
    "sagas",
    "seeding",
    "seeding_periods",
    "seeding_rows",
    "seeding_steps",
    "seeding_users",
    "seeds",
    "services",
    "sidecars",
    "watching",
    "worker",
]
