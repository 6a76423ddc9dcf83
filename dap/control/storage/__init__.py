"""dap.control.storage — the control plane's Postgres: schema, migrations, pool, artifacts, deployments.

The floor of the I/O concerns: it knows tables and statements, not the rules that decide what a
snapshot deploys (``supply``) nor who asks (``serving``). Its modules are its face::

    schema   the ``dap_control`` schema and its numbered migrations
    store    the pool (``connect``), artifacts, deployments, the snapshot version, revocation
"""

__all__ = ["schema", "store"]
