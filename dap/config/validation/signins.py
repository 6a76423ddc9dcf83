"""Rules on a workspace's sign-in: every declared OpenID provider parses (``dap.config.providers``).

The same parse the server uses decides here, so ``dap validate``, registration and every boot
refuse what the server could not serve, naming the provider and the key.
"""

from __future__ import annotations

from collections.abc import Iterator

from dap.config import providers
from dap.config.errors import Problem
from dap.config.specs import Spec
from dap.config.validation import locating


def provider_rules(spec: Spec) -> Iterator[Problem]:
    for workspace in spec.workspaces.values():
        auth = workspace.spec.auth
        for name, raw in (auth.providers if auth is not None else {}).items():
            try:
                providers.parse_all({name: raw})
            except providers.DeclarationError as exc:
                path = f"spec.auth.providers.{name}" + (f".{exc.key}" if exc.key else "")
                yield locating.at(spec, workspace, path, str(exc))
