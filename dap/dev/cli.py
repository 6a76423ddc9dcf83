"""``dap dev`` and ``dap token``: the command line of dev mode; this module only declares options.

``dap dev`` runs in ``running`` (``--fleet`` hands the process to ``fleet``); ``dap token`` signs
with ``tokens``. A refusal is one line on stderr and exit code 1 (2 for usage errors), as for
``dap pod``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from dap import embedded, listening, logs
from dap.config import names
from dap.dev import fleet, running, tokens
from dap.resource_pod import errors
from dap.server import errors as server_errors
from dap.server import options


def _refuse(message: str, code: int = 1) -> NoReturn:
    click.echo(f"dap: {message}", err=True)
    sys.exit(code)


def _seconds(value: str, option: str) -> float:
    try:
        return options.parse_duration(value)
    except server_errors.BootRefused as exc:
        raise errors.ConfigError(f"{option}: {exc}") from exc


def _fleet(raw: dict[str, Any]) -> NoReturn:
    try:
        config = fleet.kubeconfig(raw["kubeconfig"], os.environ)
    except errors.ConfigError as exc:
        _refuse(str(exc), 2)
    argv = fleet.command(
        config,
        raw["fleet_clusters"],
        port=raw["control_port"],
        data_dir=raw["data_dir"],
        log_level=raw["log_level"],
    )
    fleet.run(argv)
    sys.exit(1)  # not reached: run replaces the process


@click.command()
@click.option(
    "--spec",
    "spec_dir",
    default="examples/procurement",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),  # must exist unless --fleet: checked in dev
    envvar="DAP_SPEC",
    help="manifest directory to register and serve",
)
@click.option("--workspace", default=names.DEFAULT_WORKSPACE, show_default=True, envvar="DAP_WORKSPACE")
@click.option("--addr", default="127.0.0.1:8080", show_default=True, envvar="DAP_ADDR", help="REST, UI")
@click.option(
    "--admin-addr", default="127.0.0.1:9102", show_default=True, envvar="DAP_ADMIN_ADDR", help="empty: off"
)
@click.option(
    "--control-port",
    default=8443,
    show_default=True,
    type=int,
    envvar="DAP_CONTROL_PORT",
    help="control plane",
)
@click.option("--dsn", envvar="DAP_DSN", help="use this Postgres instead of the embedded one")
@click.option(
    "--data-dir",
    default=Path(".dap"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    envvar="DAP_DATA_DIR",
    help="embedded Postgres (a database per spec directory), signing key, pod state",
)
@click.option("--pull-interval", default="10s", show_default=True, envvar="DAP_PULL_INTERVAL")
@click.option("--watch", is_flag=True, envvar="DAP_WATCH", help="re-register on file changes")
@click.option(
    "--reset",
    is_flag=True,
    help="forget this spec's data first (its embedded database and pod state); other specs keep theirs",
)
@click.option(
    "--log-level",
    default="warn",
    show_default=True,
    envvar="DAP_LOG_LEVEL",
    type=click.Choice(sorted(logs.LEVELS)),
)
@click.option(
    "--sidecar-endpoint",
    envvar="DAP_SIDECAR_ENDPOINT",
    help="the app process for impl.type sidecar actions: unix:///path.sock or http://127.0.0.1:PORT",
)
@click.option(
    "--runtime", envvar="DAP_RUNTIME", help="python|node|php: the pod starts the app process itself"
)
@click.option(
    "--app-dir",
    envvar="DAP_APP_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="the app's directory with --runtime",
)
@click.option("--invoke-timeout", default="30s", show_default=True, envvar="DAP_INVOKE_TIMEOUT")
@click.option(
    "--seed/--no-seed",
    default=True,
    show_default=True,
    envvar="DAP_SEED",
    help="load the spec's seed/ records into the workspace once it is served (idempotent)",
)
@click.option(
    "--auto-approve",
    is_flag=True,
    envvar="DAP_AUTO_APPROVE",
    help="grant approval gates at once, saying so in the log and the audit trail (off: approve by hand)",
)
@click.option(
    "--fleet",
    is_flag=True,
    help="instead: one region and two namespace 'clusters' on a Kubernetes API server (dev-fleet), "
    "each with a dev-mode operator (claims on local datastores auto-granted)",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="--fleet: the API server's administrator kubeconfig (default: $KUBECONFIG)",
)
@click.option(
    "--fleet-clusters", default="a=2,b=2", show_default=True, help="--fleet: NAME=MAX,... one namespace each"
)
def dev(**raw: Any) -> None:
    """Run the whole pipeline on a laptop: Postgres, control plane, registration and a pod.

    With --fleet, show the Kubernetes-native control instead: `dap control dev-fleet` on the API
    server of --kubeconfig, its region API on --control-port, its Postgres under --data-dir.
    """
    logs.configure(raw["log_level"])
    if raw["fleet"]:
        _fleet(raw)
    if not raw["spec_dir"].is_dir():
        raise click.BadParameter(f"Directory '{raw['spec_dir']}' does not exist.", param_hint="'--spec'")
    try:
        config = running.DevConfig(
            spec_dir=raw["spec_dir"],
            workspace=raw["workspace"],
            addr=raw["addr"],
            admin_addr=raw["admin_addr"],
            control_port=raw["control_port"],
            dsn=raw["dsn"],
            data_dir=raw["data_dir"],
            pull_interval=_seconds(raw["pull_interval"], "--pull-interval"),
            watch=raw["watch"],
            log_level=raw["log_level"],
            reset=raw["reset"],
            sidecar_endpoint=raw["sidecar_endpoint"],
            runtime=raw["runtime"],
            app_dir=raw["app_dir"],
            invoke_timeout=raw["invoke_timeout"],
            auto_approve=raw["auto_approve"],
            seed=raw["seed"],
        )
        code = asyncio.run(running.run(config))
    except (errors.PodError, server_errors.BootRefused, embedded.EmbeddedPostgresError) as exc:
        _refuse(str(exc))
    except listening.ListenError as exc:  # an address in use, forbidden, not this machine's
        _refuse(str(exc))
    except OSError as exc:  # not a listener (those are ListenError): say what failed on which file
        _refuse(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc))
    sys.exit(code)


@click.command()
@click.option(
    "--role",
    "roles",
    multiple=True,
    help="a role of the token, repeatable (default: admin); roles name Role manifests",
)
@click.option("--username", default="dev", show_default=True, help="the 'username' claim (and 'sub')")
@click.option("--sub", default=None, help="the principal id (default: the username)")
@click.option(
    "--attr",
    "attrs",
    multiple=True,
    metavar="KEY=VALUE",
    help="an application attribute, repeatable, e.g. --attr region=north (JSON values allowed)",
)
@click.option(
    "--workspace",
    default=tokens.DEV_WORKSPACE,
    show_default=True,
    envvar="DAP_WORKSPACE",
    help="the workspace the token is for; empty: any workspace",
)
@click.option("--ttl", default="24h", show_default=True, help="lifetime, e.g. 15m, 24h")
@click.option(
    "--secret",
    default=tokens.DEV_SECRET,
    envvar="DAP_JWT_SECRET",
    help="HS256 secret (default: the one `dap dev` uses)  [env: DAP_JWT_SECRET]",
)
@click.option(
    "--private-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="sign RS256/ES256 with this PEM private key instead of the secret",
)
@click.option("--issuer", default=tokens.DEV_ISSUER, show_default=True, envvar="DAP_JWT_ISSUER")
def token(**raw: Any) -> None:
    """Print a JWT for a dap server (by default one `dap dev` accepts).

    \b
      export TOKEN=$(dap token)                                      # admin of workspace default
      export BUYER=$(dap token --role buyer --username bob --attr region=north)
    """
    try:
        ttl = _seconds(raw["ttl"], "--ttl")
        body = tokens.claims(
            username=raw["username"],
            sub=raw["sub"],
            roles=raw["roles"] or ("admin",),
            workspace=raw["workspace"] or None,
            attrs=tokens.parse_attrs(raw["attrs"]),
            ttl=ttl,
            issuer=raw["issuer"],
        )
        key = raw["private_key"].read_text() if raw["private_key"] is not None else None
        click.echo(tokens.sign(body, secret=raw["secret"], private_key_pem=key))
    except errors.ConfigError as exc:
        _refuse(str(exc), 2)
