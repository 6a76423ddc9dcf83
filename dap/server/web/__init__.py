"""dap.server.web — the HTTP face: assembly, entity handlers, filters, OpenAPI, UI metadata, admin.

The top floor: handlers parse a request, call the floors below (documents, access, storage)
and shape the reply; nothing below imports this package. Its face is ``app``, which assembles
both listeners (``dap.server.create_server`` resolves to it); the rest are inner modules, routes
and their plumbing::

    app        pool, schema, the tenant application and the admin listener, their runners
    requests   resolving workspace, caller and catalog; ids, If-Match, bodies, replies
    rest       list, find, create, update, delete
    moves      actions on one record (submit, cancel)
    trails     a record's audit trail
    grants     grant requests between apps, and service calls made through an app
    filters    list query strings → a typed query (pure)
    openapi    OpenAPI 3.1 of a workspace
    ui_meta    UI metadata of apps, pages, forms
    users      first-admin setup and password login
    passwords  password change; reset by a single-use link sent by mail
    identity   the caller of a bearer token: a workspace's provider or the local key
    oidc       sign-in through OpenID providers: code flow with PKCE, sessions, refresh, logout
    admin      /metrics, /health, /workspaces
"""

__all__ = ["app"]
