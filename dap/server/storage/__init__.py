"""dap.server.storage — Postgres: the pool, tables, migrations, SQL, registries, the find cache.

The bottom floor of the server: it knows tables and statements, not who asks or what a write
means, and imports nothing of the server above ``errors`` (the value model ``fieldvalues``, the
catalog, access, documents and web all build on it). Its modules are its face; siblings
elsewhere import them from here (``from dap.server.storage import sql``), never anything not
listed in ``__all__``::

    db           the process's one asyncpg pool, connection types, JSON encoding
    deferred     a transaction begun by the first statement that needs it (lone statements)
    tables       entities → tables, columns, indexes, shortened identifiers (pure)
    migrations   stored registry + manifests → ordered, classified steps (pure)
    indexing     the declared lists → the composite indexes that serve them (pure)
    schema_sync  applying a plan to Postgres and recording it
    building     the online index builds (CREATE INDEX CONCURRENTLY), resumed after a crash
    guarding     a list no index serves on a big tenant: logged once, counted
    queries      the typed list query and the system columns as fields (pure)
    sql          parameterised statements of the REST actions (pure)
    numbering    natural-key patterns and the per-tenant counters behind them
    workspaces   the workspace registry (slugs, tenant ids)
    caching      the find-by-id cache, correct across processes (LISTEN/NOTIFY)
    files        the bytes of file fields on the local filesystem (the storage fallback)

Modules load on first import (none is imported here), so the boot path pays only for what the
migration needs.
"""

__all__ = [
    "building",
    "caching",
    "db",
    "deferred",
    "files",
    "guarding",
    "indexing",
    "migrations",
    "numbering",
    "queries",
    "schema_sync",
    "sql",
    "tables",
    "workspaces",
]
