"""``dap serve`` with the app-process bridge, and the deprecated ``dap bridge``.

``dap serve`` is the server's own command with one addition: when ``--sidecar-endpoint`` is given,
:func:`dap.bridge.hosting.attach` hosts the bridge in the server's process (the server package
cannot import the bridge; this entry point joins them). ``dap bridge`` exists because the spec
keeps it; it only says that it is deprecated and what replaces it.
"""

from __future__ import annotations

import sys

import click

from dap.bridge import hosting
from dap.server import cli as server_cli

if hosting.attach not in server_cli.ATTACH:
    server_cli.ATTACH.append(hosting.attach)

serve = server_cli.serve


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def bridge() -> None:
    """Deprecated: the standalone bridge. Use `dap serve --sidecar-endpoint ...` instead."""
    click.echo(
        "dap bridge is deprecated: the bridge runs inside the server process. Start the app process "
        "listening on a unix socket or a loopback port, then run `dap serve --sidecar-endpoint "
        "unix:///path/app.sock` (or http://127.0.0.1:PORT); /ctx is served on --ctx-listen.",
        err=True,
    )
    sys.exit(2)
