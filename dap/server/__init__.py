"""dap.server — the production server: REST engine, UI metadata, admin listener, migrations.

Public face::

    catalog = server.Catalog.from_spec(config.load_spec(path))
    opts = server.options.check(dsn=..., jwt_secret=..., cors_origins=[...])
    srv = await server.create_server(opts, catalog)
    await srv.start(); ...; await srv.stop()
    srv.app[server.state.SPEC].swap(new_catalog)   # the resource pod's atomic swap

Layout: ``options`` (boot rules), ``errors`` (the error tree), ``auth`` (JWT), ``tables`` and
``migrations`` (pure schema description and planning), ``schema_sync`` (applying plans),
``booting`` (the database half of a boot), ``records``, ``filters`` and ``sql`` (pure request →
SQL), ``workspaces``, ``accounts`` and ``users``, ``rest`` and ``writing`` (the entity API),
``documents`` and ``references`` (lifecycle moves and what blocks them), ``permissions``,
``scoping``, ``txdates`` and ``guards`` (who may do what to which rows), ``deriving``,
``converting``, ``checking``, ``numbering`` and ``filling`` (computed values, auto_fill, rules,
natural keys), ``auditing`` and ``trails`` (the audit trail), ``caching`` (find-by-id across
processes), ``ui_meta``, ``openapi``, ``admin``, ``metrics``, ``app`` (assembly), ``cli``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dap.server import errors, migrations, options, state
    from dap.server.app import Server, create_server, prepare_database
    from dap.server.catalog import Catalog

__all__ = [
    "Catalog",
    "Server",
    "create_server",
    "errors",
    "migrations",
    "options",
    "prepare_database",
    "state",
]

# Public names resolve on first use (PEP 562): ``dap serve`` imports ``dap.server.cli`` and reaches
# Postgres before the web stack is imported, so the package itself must not import ``app``.
_WHERE = {
    "Catalog": "dap.server.catalog",
    "Server": "dap.server.app",
    "create_server": "dap.server.app",
    "prepare_database": "dap.server.app",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    if name in __all__:
        return importlib.import_module(f"dap.server.{name}")
    raise AttributeError(f"module 'dap.server' has no attribute {name!r}")
