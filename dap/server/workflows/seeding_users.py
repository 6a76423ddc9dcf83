"""Seeded password accounts: the rows of a seed document whose ``entity`` is ``users``.

A demo is only useful when its people can sign in: the committee member whose inbox holds an
approval, the buyer whose orders the board shows. The first-admin setup over HTTP closes once a
workspace holds data (``web.users``), so a seeded workspace gets its accounts from the seed
instead::

    entity: users
    records:
      - {username: ada, password: procurement-demo, roles: [purchase_committee], email: ada@example.com}

Accounts are ``dap.users`` rows, keyed by username (the seed key), passwords hashed as
``/_ui/setup`` hashes them (``access.accounts``), never stored in clear. A second run leaves an
account alone when its row is unchanged and re-writes roles, e-mail and password when it
changed. Roles must name roles of the spec (or ``admin``). A seed with passwords in it is for
demos and tests: production accounts come from the identity provider.
"""

from __future__ import annotations

import re
import uuid

from dap.server.access import accounts
from dap.server.catalog import Catalog
from dap.server.storage import db
from dap.server.workflows import seeds

ENTITY = "users"
USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")  # as ``/_ui/login`` accepts
MIN_PASSWORD = 8
FIELDS = frozenset({"username", "password", "email", "roles"})
INVALID = "SVC.VALIDATE.INVALID"


def check(catalog: Catalog, row: seeds.Row) -> list[seeds.Problem]:
    """What is wrong with one account row (pure); each line ends with ``INVALID``, the code the
    first-admin setup answers a bad account with."""
    values = row.values
    wrong: list[tuple[str | None, str]] = [
        (k, "unknown field (username, password, email, roles)") for k in values if k not in FIELDS
    ]
    username, password = values.get("username"), values.get("password")
    if not isinstance(username, str) or not USERNAME.fullmatch(username):
        wrong.append(("username", "1-128 characters: letters, digits, _ . @ -"))
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        wrong.append(("password", f"a string of at least {MIN_PASSWORD} characters"))
    email = values.get("email")
    if email is not None and (not isinstance(email, str) or "@" not in email):
        wrong.append(("email", "an e-mail address"))
    roles = values.get("roles", [])
    known = set(catalog.grants.patterns) | {"admin"}
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        wrong.append(("roles", "a list of role names"))
    else:
        wrong += [("roles", f"no role {r!r} in this spec") for r in roles if r not in known]
    if row.submit or row.actions or row.votes or row.key is not None:
        wrong.append((None, "an account takes no _key, _submit, _actions or _votes"))
    return [row.problem(path, f"{message} ({INVALID})") for path, message in wrong]


async def load(
    conn: db.Connection, tenant: uuid.UUID, row: seeds.Row, known: str | None
) -> tuple[uuid.UUID, bool]:
    """Create the account, or re-write it when its row changed (``known`` is the digest of the row
    that last wrote it); ``(user id, whether anything was written)``."""
    values = row.values
    found = await conn.fetchval(
        "SELECT id FROM dap.users WHERE tenant_id = $1 AND username = $2", tenant, values["username"]
    )
    if found is not None and known == row.digest():
        return found, False
    hashed = accounts.hash_password(values["password"])
    user_id: uuid.UUID = await conn.fetchval(
        """INSERT INTO dap.users (tenant_id, username, email, password_hash, roles)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (tenant_id, username) DO UPDATE
               SET email = EXCLUDED.email, password_hash = EXCLUDED.password_hash, roles = EXCLUDED.roles
           RETURNING id""",
        tenant,
        values["username"],
        values.get("email"),
        hashed,
        list(values.get("roles", [])),
    )
    return user_id, True
