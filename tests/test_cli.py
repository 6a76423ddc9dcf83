"""The ``dap`` command lists every part without importing it, and each listed command exists."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from dap.cli import COMMANDS, LazyGroup, main


def test_help_lists_every_command_without_importing_the_parts() -> None:
    probe = (
        "import sys; from click.testing import CliRunner; from dap.cli import main; "
        "out = CliRunner().invoke(main, ['--help']).output; "
        "heavy = [m for m in ('kopf', 'aiohttp', 'asyncpg', 'dap.server', 'dap.operator') "
        "if m in sys.modules]; "
        "print(heavy); print(out)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    first, _, help_text = result.stdout.partition("\n")
    assert first == "[]"
    for name in COMMANDS:
        assert name in help_text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_resolves(name: str) -> None:
    assert LazyGroup._target(name) is not None, f"{COMMANDS[name][0]} is not a click command"
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
