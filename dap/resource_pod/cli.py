"""``dap pod``, ``dap dev`` and ``dap token``.

``dap pod`` takes every option of ``dap serve`` except ``--spec`` — the parameters are copied
from ``dap.server.cli.serve`` itself, so the two commands cannot drift — plus the pod's own:
``--control-url`` (env ``CONTROL_CLUSTER_URL``), ``--workspace-id`` (env ``WORKSPACE_ID``),
``--pull-interval`` (10 s with ``--dev``, 5 min otherwise), ``--trusted-keys`` (env
``DAP_TRUSTED_KEYS``), ``--state-dir``, ``--dev`` and the evidence intervals. Every option also
reads ``DAP_<OPTION>``. A refusal is one line on stderr and exit code 1 (2 for usage errors).

``dap dev`` is in ``dev.py`` and tokens in ``tokens.py``; this module only declares options.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from dap import embedded, listening, logs, tracing
from dap.config import names
from dap.resource_pod import errors, hosting, settings, tokens, verifying
from dap.server import cli as server_cli
from dap.server import errors as server_errors
from dap.server import loops, options

DEV_STATE_DIR = Path(".dap") / "pod"
PROD_STATE_DIR = Path("/tmp") / "dap-pod"  # the operator mounts an emptyDir at /tmp


def _refuse(message: str, code: int = 1) -> NoReturn:
    click.echo(f"dap: {message}", err=True)
    sys.exit(code)


def _read_key(value: str | None) -> str | None:
    """``--jwt-public-key`` is PEM text or the path of a PEM file (as for ``dap serve``)."""
    if not value or value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        return Path(value).read_text()
    except OSError as exc:
        raise server_errors.BootRefused(f"cannot read --jwt-public-key {value}: {exc.strerror}") from exc


def _seconds(value: str, option: str) -> float:
    try:
        return options.parse_duration(value)
    except server_errors.BootRefused as exc:
        raise errors.ConfigError(f"{option}: {exc}") from exc


POD_OPTIONS = (
    "control_url",
    "workspace_id",
    "pull_interval",
    "trusted_keys",
    "policy_keys",
    "policy_threshold",
    "state_dir",
    "dev",
    "long_poll",
    "cluster_id",
    "pod_name",
    "health_interval",
    "metering_interval",
)


@click.command()
@click.option(
    "--control-url",
    envvar=[names.ENV_CONTROL_CLUSTER_URL, "DAP_CONTROL_URL"],
    help="cluster (or standalone) control plane URL  [env: CONTROL_CLUSTER_URL]",
)
@click.option(
    "--workspace-id",
    envvar=[names.ENV_WORKSPACE_ID, "DAP_WORKSPACE_ID"],
    help="the workspace slug this pod serves (default with --dev: default)  [env: WORKSPACE_ID]",
)
@click.option(
    "--pull-interval",
    envvar="DAP_PULL_INTERVAL",
    help="snapshot pull interval (default 10s with --dev, else 5m)",
)
@click.option(
    "--trusted-keys",
    envvar=names.ENV_TRUSTED_KEYS,
    help="comma-separated hex ed25519 public keys trusted for artifacts  [env: DAP_TRUSTED_KEYS]",
)
@click.option(
    "--policy-keys",
    envvar="DAP_POLICY_KEYS",
    help="comma-separated hex public keys of the app's approvers (signing policy, with --policy-threshold)",
)
@click.option(
    "--policy-threshold",
    type=int,
    default=0,
    envvar="DAP_POLICY_THRESHOLD",
    help="approvals by --policy-keys an artifact needs (k of n; 0: no policy)",
)
@click.option(
    "--state-dir",
    envvar="DAP_STATE_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"keeps the last verified artifact (default {DEV_STATE_DIR} with --dev, else {PROD_STATE_DIR})",
)
@click.option("--dev", is_flag=True, envvar="DAP_DEV", help="may trust the control's /v1/keys; long poll")
@click.option(
    "--long-poll/--no-long-poll",
    default=None,
    envvar="DAP_LONG_POLL",
    help="hold snapshot requests open so changes arrive at once (default: on with --dev)",
)
@click.option("--cluster-id", envvar=["DAP_CLUSTER_ID", "DAP_CLUSTER"], help="named in evidence records")
@click.option(
    "--pod-name", envvar=["DAP_POD_NAME", "POD_NAME", "HOSTNAME"], default="", help="named in health evidence"
)
@click.option("--health-interval", default="30s", show_default=True, envvar="DAP_HEALTH_INTERVAL")
@click.option("--metering-interval", default="5m", show_default=True, envvar="DAP_METERING_INTERVAL")
def pod(**raw: Any) -> None:
    """Run the generic resource pod: pull, verify and serve one workspace's artifact."""
    mine = {key: raw.pop(key) for key in POD_OPTIONS}
    logs.configure("debug" if raw.get("log_debug") else raw["log_level"])
    tracing.configure("dap-pod")  # OTEL_* variables; off (and never imported) unless they ask
    handle = None
    try:
        if not raw.get("dsn") and mine["dev"]:
            click.echo("dap pod: no --dsn: starting the embedded Postgres in .dap/pg", err=True)
            raw["dsn"], handle = embedded.start(Path(".dap") / "pg")
        raw["jwt_public_key"] = _read_key(raw["jwt_public_key"])
        config = pod_settings(mine)
        raw["workspace"] = raw.get("workspace") or config.workspace
        opts = options.check(**raw)
    except (errors.ConfigError, server_errors.BootRefused, embedded.EmbeddedPostgresError) as exc:
        _refuse(str(exc), getattr(exc, "exit_code", 1))
    try:
        loops.run(_run(opts, config))
    except (errors.PodError, server_errors.BootRefused) as exc:
        _refuse(str(exc), getattr(exc, "exit_code", 1))
    except listening.ListenError as exc:  # an address in use, forbidden, not this machine's
        _refuse(str(exc))
    except OSError as exc:  # not a listener (those are ListenError): say what failed on which file
        _refuse(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc))
    finally:
        if handle is not None:
            handle.cleanup()


# every option of `dap serve` except --spec, taken from the command itself
pod.params[0:0] = [p for p in server_cli.serve.params if p.name != "spec"]


def pod_settings(mine: dict[str, Any]) -> settings.Settings:
    """The pod's own options → ``Settings``; raise ``ConfigError`` with a one-line reason."""
    dev = bool(mine["dev"])
    if not mine["control_url"]:
        raise errors.ConfigError("no --control-url given (or CONTROL_CLUSTER_URL)")
    workspace = mine["workspace_id"] or (names.DEFAULT_WORKSPACE if dev else None)
    if not workspace:
        raise errors.ConfigError("no --workspace-id given (or WORKSPACE_ID)")
    interval = mine["pull_interval"] or ("10s" if dev else "5m")
    trusted = verifying.trusted_keys([mine["trusted_keys"] or ""])
    long_poll = mine["long_poll"] if mine["long_poll"] is not None else dev
    return settings.Settings(
        control_url=mine["control_url"].rstrip("/"),
        workspace=workspace,
        state_dir=mine["state_dir"] or (DEV_STATE_DIR if dev else PROD_STATE_DIR),
        pull_interval=_seconds(interval, "--pull-interval"),
        trusted_keys=trusted,
        policy_keys=verifying.trusted_keys([mine["policy_keys"] or ""]),
        policy_threshold=mine["policy_threshold"] or 0,
        dev=dev,
        fetch_keys=dev and not trusted,
        long_poll=long_poll,
        cluster_id=mine["cluster_id"] or None,
        pod_name=mine["pod_name"] or "",
        health_interval=_seconds(mine["health_interval"], "--health-interval"),
        metering_interval=_seconds(mine["metering_interval"], "--metering-interval"),
    )


async def _run(opts: options.ServeOptions, config: settings.Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = await hosting.start(opts, config)
    phase = running.pod.status.as_json()
    click.echo(
        f"dap pod: workspace {config.workspace} on {running.api_url}"
        f"{', admin ' + running.server.urls['admin'] if 'admin' in running.server.urls else ''}; "
        f"control {config.control_url}, pull every {config.pull_interval:g}s"
        f"{' (long poll)' if config.long_poll else ''}; "
        f"running {phase['artifact_id'] or 'nothing yet'}",
        err=True,
    )
    await stop.wait()
    click.echo("dap pod: shutting down (finishing in-flight requests)", err=True)
    await running.stop()


def _fleet(raw: dict[str, Any]) -> NoReturn:
    from dap.resource_pod import devfleet

    try:
        config = devfleet.kubeconfig(raw["kubeconfig"], os.environ)
    except errors.ConfigError as exc:
        _refuse(str(exc), 2)
    argv = devfleet.command(
        config,
        raw["fleet_clusters"],
        port=raw["control_port"],
        data_dir=raw["data_dir"],
        log_level=raw["log_level"],
    )
    devfleet.run(argv)
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
    from dap.resource_pod import dev as dev_mode

    logs.configure(raw["log_level"])
    if raw["fleet"]:
        _fleet(raw)
    if not raw["spec_dir"].is_dir():
        raise click.BadParameter(f"Directory '{raw['spec_dir']}' does not exist.", param_hint="'--spec'")
    try:
        config = dev_mode.DevConfig(
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
        code = asyncio.run(dev_mode.run(config))
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
