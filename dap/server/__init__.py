"""dap.server — the production server: REST engine, UI metadata, admin listener, migrations.

Public face::

    catalog = server.Catalog.from_spec(config.load_spec(path))
    opts = server.options.check(dsn=..., jwt_secret=..., cors_origins=[...])
    srv = await server.create_server(opts, catalog)
    await srv.start(); ...; await srv.stop()
    srv.app[server.state.SPEC].swap(new_catalog)   # the resource pod's atomic swap

Layout: subpackages by concern, each with one face (its ``__init__``), stacked so that imports
point down only (import-linter's ``layers`` contract in pyproject.toml says the same)::

    cli            `dap serve`, `dap migrate`                               (root, top)
    web/           the HTTP face: assembly, entity handlers, filters, OpenAPI, UI metadata, admin
    booting        the database half of a boot;  state  the app's typed keys (root)
    workflows/     actions, state machines, approvals, jobs               (to come)
    events/        outbox, channels, websocket                            (to come)
    documents/     what a write means: lifecycle, references, derived values, the audit trail
    access/        who may do what: JWT, permissions, row and create scope, guards, accounts
    catalog/       the loaded spec compiled once: resources, derivation plans, grants, expressions
    fieldvalues/   the value model: a field's value from JSON, text, CSV cells and formulas, its
                   limits and precision, its JSON; nothing else converts a field's value
    storage/       Postgres: pool, tables, migrations, SQL, registries, find cache
    options, metrics, loops, errors                                        (root, bottom)

The app-process bridge lives beside this package in ``dap/bridge/`` and calls these faces only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dap.server import errors, options, state
    from dap.server.catalog import Catalog
    from dap.server.storage import migrations
    from dap.server.web.app import Server, create_server, prepare_database

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
# Postgres before the web stack is imported, so the package itself must not import ``web``.
_WHERE = {
    "Catalog": "dap.server.catalog",
    "Server": "dap.server.web.app",
    "create_server": "dap.server.web.app",
    "prepare_database": "dap.server.web.app",
}
_MODULES = {
    "errors": "dap.server.errors",
    "migrations": "dap.server.storage.migrations",
    "options": "dap.server.options",
    "state": "dap.server.state",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'dap.server' has no attribute {name!r}")
