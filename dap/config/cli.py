"""``dap validate DIR`` and ``dap schema``.

Exit codes of ``validate``: 0 valid (one summary line), 1 invalid (every problem, one per line,
no traceback), 2 usage error (click's own code, e.g. a directory that does not exist).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from dap.config import loading
from dap.config.errors import SpecError
from dap.config.schema import manifest_schema


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def validate(directory: Path) -> None:
    """Validate the manifests in DIRECTORY and summarise them."""
    try:
        spec = loading.load_spec(directory)
    except SpecError as exc:
        for problem in exc.problems:
            click.echo(str(problem))
        click.echo(f"invalid: {len(exc.problems)} problem(s) in {directory}", err=True)
        sys.exit(1)
    for warning in spec.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"valid: {spec.summary()}")


@click.command()
@click.option("--indent", type=int, default=2, show_default=True, help="indentation of the JSON output")
def schema(indent: int) -> None:
    """Print the JSON Schema (draft-07) of every manifest kind."""
    click.echo(json.dumps(manifest_schema(), indent=indent or None, sort_keys=False))
