"""The tables of approval gates (``dap.approvals``, ``dap.approval_votes``; see ``approvals``).

Apart from ``approvals`` so that the boot path creates them without importing what a request
needs (the access and documents modules, JWT): ``booting`` imports this module only.
"""

from __future__ import annotations

from dap.server.storage import db

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.approvals (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    entity text NOT NULL,
    record_id uuid NOT NULL,
    action text NOT NULL,
    transition text NOT NULL,
    to_state text NOT NULL,
    reject_to text,
    status text NOT NULL DEFAULT 'pending',
    step integer NOT NULL,
    step_name text NOT NULL,
    step_title text NOT NULL,
    approvers integer NOT NULL,
    votes integer NOT NULL DEFAULT 0,
    roles text[] NOT NULL DEFAULT '{}',
    permission text,
    self_approval boolean NOT NULL DEFAULT false,
    basis text NOT NULL,
    escalate_at timestamptz,
    escalated_at timestamptz,
    escalate_to text[] NOT NULL DEFAULT '{}',
    escalate_notify boolean NOT NULL DEFAULT true,
    requester_sub text NOT NULL,
    requester_username text NOT NULL,
    history jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    decided_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS approvals_one_open
    ON dap.approvals (tenant_id, entity, record_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS approvals_inbox
    ON dap.approvals (tenant_id, created_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS approvals_due
    ON dap.approvals (escalate_at) WHERE status = 'pending' AND escalated_at IS NULL;
CREATE TABLE IF NOT EXISTS dap.approval_votes (
    tenant_id uuid NOT NULL,
    id bigserial NOT NULL,
    approval_id uuid NOT NULL,
    step integer NOT NULL,
    step_name text NOT NULL,
    principal_sub text NOT NULL,
    username text NOT NULL,
    decision text NOT NULL,
    comment text,
    record_version bigint NOT NULL,
    basis text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    voided_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS approval_votes_one
    ON dap.approval_votes (tenant_id, approval_id, step, principal_sub) WHERE voided_at IS NULL;
"""


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)
