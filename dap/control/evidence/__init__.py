"""dap.control.evidence — evidence records pods report: models, validation, storage, the outbox.

Evidence flows pod -> cluster control -> region control (spec: Events 5). It builds on
``storage`` and knows neither the supply-chain rules nor clusters. Its modules are its face::

    models    one model per evidence type, batch validation (pure)
    storing   accepted records, the operators' query, the cluster outbox in Postgres
"""

__all__ = ["models", "storing"]
