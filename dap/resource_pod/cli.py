"""``dap pod``: the resource pod's command (``dap dev`` and ``dap token`` are in ``dap.dev.cli``).

``dap pod`` takes every option of ``dap serve`` except ``--spec`` — the parameters are copied
from ``dap.server.cli.serve`` itself, so the two commands cannot drift — plus the pod's own:
``--control-url`` (env ``CONTROL_CLUSTER_URL``), ``--workspace-id`` (env ``WORKSPACE_ID``),
``--pull-interval`` (10 s with ``--dev``, 5 min otherwise), ``--trusted-keys`` (env
``DAP_TRUSTED_KEYS``), ``--state-dir``, ``--dev`` and the evidence intervals. Every option also
reads ``DAP_<OPTION>``. A refusal is one line on stderr and exit code 1 (2 for usage errors).

This module only declares options; the pod's work is in ``hosting``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from dap import embedded, listening, logs, tracing
from dap.config import names
from dap.resource_pod import errors, hosting, settings, verifying
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
    server_cli.keep_logs(raw)
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
