"""The Role manifest kind: the permission catalogue the specification leaves open.

A role is what the JWT ``roles`` claim names; a permission is a dotted name such as
``buying.purchase_order.approve`` that ``required_permission`` (fields and actions) and
``backdate.override_permission`` ask for. A Role grants permission *patterns*, where ``*``
matches any run of characters, dots included (``buying.*``, ``*.read_bank``, ``*``), and may
include other roles::

    apiVersion: dap.io/v1
    kind: Role
    metadata: {name: buying_manager}
    spec:
      title: Buying manager
      permissions: [buying.purchase_order.*, buying.supplier.read_bank]
      includes: [buyer]

The role ``admin`` is built in and holds every permission; declaring it is an error (a spec
cannot narrow the first admin that ``/_ui/setup`` creates). Matching lives here, next to the
grammar, so that validation and the server can never read a pattern differently.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Final

import pydantic
from pydantic import StringConstraints

from dap.config.base import Identifier, Record

ADMIN_ROLE: Final = "admin"
PERMISSION_NAME: Final = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
PERMISSION_PATTERN: Final = r"^[a-z*][a-z0-9_*]*(\.[a-z*][a-z0-9_*]*)*$"

PermissionPattern = Annotated[
    str,
    StringConstraints(pattern=PERMISSION_PATTERN, max_length=256),
    pydantic.Field(description="permission name or glob: buying.purchase_order.approve, buying.*, *"),
]


class RoleSpec(Record):
    title: str | None = None
    description: str | None = None
    permissions: tuple[PermissionPattern, ...] = ()
    includes: tuple[Identifier, ...] = ()


def is_permission_name(text: str) -> bool:
    """Whether ``text`` is a permission name (dotted lower snake_case segments, no ``*``)."""
    return re.fullmatch(PERMISSION_NAME, text) is not None


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def matches(pattern: str, permission: str) -> bool:
    """Whether the granted ``pattern`` covers ``permission`` (``*`` spans any characters, dots too)."""
    if "*" not in pattern:
        return pattern == permission
    return _compiled(pattern).fullmatch(permission) is not None
