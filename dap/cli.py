"""The ``dap`` command.

Subcommands live with the package they drive and are imported only when invoked, so that
``dap validate`` never pays for importing kopf or aiohttp. ``COMMANDS`` maps each name to
``module:attribute`` of a click command.
"""

from __future__ import annotations

import importlib

import click

from dap import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("dap.server.cli:validate", "validate a manifest directory (and what no index serves)"),
    "schema": (
        "dap.server.cli:schema",
        "print the JSON Schema (draft-07) of every manifest kind, or --proto DIR: the gRPC .proto",
    ),
    "serve": ("dap.bridge.cli:serve", "run the production server (with the app-process bridge)"),
    "bridge": ("dap.bridge.cli:bridge", "deprecated: the bridge runs inside `dap serve`"),
    "migrate": ("dap.server.cli:migrate", "apply pending schema changes, destructive ones included"),
    "seed": ("dap.server.cli:seed", "load a spec's seed records into a workspace through the API's rules"),
    "control": (
        "dap.control.cli.commands:control",
        "control plane: serve (region, cluster, standalone), keys",
    ),
    "register": ("dap.control.cli.commands:register", "register a manifest directory with a control plane"),
    "operator": ("dap.operator.cli:operator", "run the Kubernetes operator"),
    "claim": ("dap.operator.cli:claim", "sign and inspect resource claims"),
    "pod": ("dap.resource_pod.cli:pod", "run the generic resource pod"),
    "dev": ("dap.dev.cli:dev", "run the whole local pipeline on a laptop"),
    "token": ("dap.dev.cli:token", "print a JWT with given roles and attributes (dev secret)"),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing uses the short help kept in COMMANDS, so `dap --help` imports no subcommand.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._target(cmd_name)

    @staticmethod
    def _target(name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        module_name, _, attribute = entry[0].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # the part is not built yet
                return None
            raise
        command = getattr(module, attribute, None)
        return command if isinstance(command, click.Command) else None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dap")
def main() -> None:
    """dap — the Declarative Application Platform."""
