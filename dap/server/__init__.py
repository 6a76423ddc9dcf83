"""dap.server — the production server: REST engine, UI metadata, admin listener, migrations.

Public face::

    catalog = server.Catalog.from_spec(config.load_spec(path))
    opts = server.options.check(dsn=..., jwt_secret=..., cors_origins=[...])
    srv = await server.create_server(opts, catalog)
    await srv.start(); ...; await srv.stop()
    srv.app[server.state.SPEC].swap(new_catalog)   # the resource pod's atomic swap

Layout: ``options`` (boot rules), ``errors`` (the error tree), ``auth`` (JWT), ``tables`` and
``migrations`` (pure schema description and planning), ``schema_sync`` (applying plans),
``records``, ``filters`` and ``sql`` (pure request → SQL), ``workspaces``, ``users``, ``rest``,
``ui_meta``, ``openapi``, ``admin``, ``metrics``, ``app`` (assembly), ``cli``.
"""

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
