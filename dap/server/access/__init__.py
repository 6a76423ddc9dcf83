"""dap.server.access — who may do what: identity, permissions, row scope, create scope, field guards.

Above the catalog and storage, below documents: a write's meaning (``documents``) asks this
package whether the caller may do it and to which rows. The decisions are pure functions of the
catalog and the caller; ``guards`` applies them to a request with one line per step. Its face is
the modules in ``__all__`` (``from dap.server.access import guards``); the pure deciders behind
``guards`` are inner modules (tests reach them directly)::

    auth         JWT verification and issuing; the Principal of a request
    accounts     workspace users at rest (``dap.users``), password hashing, setup codes
    throttling   rate limits counted in Postgres across processes (login, setup; actions next)
    providers    OpenID providers declared by a workspace; their claims mapped to a Principal
    keysets      provider tokens verified by discovery and JWKS (cached, refetched on a new kid)
    signins      pending authorization requests and provider sessions at rest
    resets       single-use, expiring password-reset tokens at rest
    mailer       outgoing mail over SMTP (reset links), settings from the environment
    guards       the access checks of one request; the one lookup of a record by id
    periods      accounting periods: which period a transaction date falls in, the write check
    (inner)      permissions: may this caller use this permission (under the catalog's Grants);
                 scoping: which records a caller may see and write; txdates: the backdate policy

Modules load on first import (none is imported here): the boot path needs ``accounts`` only.
"""

__all__ = [
    "accounts",
    "auth",
    "guards",
    "keysets",
    "mailer",
    "periods",
    "providers",
    "resets",
    "signins",
    "throttling",
]
