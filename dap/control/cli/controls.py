"""``dap control region-control`` and ``dap control cluster-control``: the two in-cluster controls.

Each logs in as kopf does (in-cluster ServiceAccount, else ``$KUBECONFIG``) and runs until
SIGINT/SIGTERM. Options are also read from ``DAP_<OPTION>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click
import kopf

from dap import kube, listening, logs, tracing
from dap.control.kube import member, region
from dap.control.serving import fleets


async def _until_signal(work: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _in_cluster_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options both in-cluster controls take: leader election, login, log level."""
    decorators = [
        click.option(
            "--leader-elect", is_flag=True, envvar="DAP_LEADER_ELECT", help="one active replica (Lease)"
        ),
        click.option(
            "--lease-namespace", default="dap-system", show_default=True, envvar="DAP_LEASE_NAMESPACE"
        ),
        click.option(
            "--kubeconfig", default="", help="log in with this kubeconfig (default: in-cluster, $KUBECONFIG)"
        ),
        click.option(
            "--log-level", type=click.Choice(sorted(logs.LEVELS)), default="info", envvar="DAP_LOG_LEVEL"
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


@click.command("region-control")
@click.option(
    "--db", envvar="DAP_DB", required=True, help="postgresql:// DSN of the region's control database"
)
@click.option(
    "--namespace", default="", envvar="DAP_NAMESPACE", help="watch Workspaces here only (default all)"
)
@click.option("--interval", type=float, default=5.0, show_default=True, envvar="DAP_INTERVAL")
@_in_cluster_options
def region_control(**opts: Any) -> None:
    """Route management Workspaces over Cluster resources (rule 5); write their status."""
    logs.configure(opts.pop("log_level"))
    tracing.configure("dap-region-control")  # OTEL_* variables; off (and never imported) unless they ask
    options = region.Options(dsn=opts.pop("db"), **opts)
    asyncio.run(_until_signal(region.run(options)))


@click.command("cluster-control")
@click.option("--region-url", envvar="DAP_REGION_URL", required=True, help="the region's control API")
@click.option("--cluster", "--cluster-id", envvar="DAP_CLUSTER_ID", required=True, help="this cluster's name")
@click.option(
    "--namespace", default="", envvar="DAP_NAMESPACE", help="keep placements here (default: their own)"
)
@click.option("--interval", type=float, default=10.0, show_default=True, envvar="DAP_INTERVAL")
@_in_cluster_options
def cluster_control(**opts: Any) -> None:
    """Pull this cluster's placements from the region and keep them as Workspaces."""
    logs.configure(opts.pop("log_level"))
    tracing.configure("dap-cluster-control")  # OTEL_* variables: its placements pulls are traced
    options = member.Options(**opts)
    asyncio.run(_until_signal(member.run(options)))


@click.command("dev-fleet")
@click.option("--kubeconfig", required=True, help="an administrator's kubeconfig of the API server to use")
@click.option("--clusters", default="a=2,b=2", show_default=True, help="NAME=MAX,... one namespace each")
@click.option("--prefix", default="dev", show_default=True, help="namespaces PREFIX-mgmt and PREFIX-NAME")
@click.option(
    "--port", type=int, default=8470, show_default=True, help="the region's control API on 127.0.0.1"
)
@click.option(
    "--data-dir", type=click.Path(path_type=Path), default=Path(".dap") / "fleet-pg", show_default=True
)
@click.option("--log-level", type=click.Choice(sorted(logs.LEVELS)), default="info", envvar="DAP_LOG_LEVEL")
@click.option(
    "--operators/--no-operators",
    default=True,
    show_default=True,
    help="run a dev-mode operator per cluster namespace (--dev-auto-grant-claims)",
)
def dev_fleet(
    kubeconfig: str, clusters: str, prefix: str, port: int, data_dir: Path, log_level: str, operators: bool
) -> None:
    """One region and several namespace "clusters" on one machine (routing, moves, status)."""
    logs.configure(log_level)
    try:
        wanted = fleets.parse_clusters(clusters)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--clusters") from exc
    try:
        run = fleets.run(kubeconfig, wanted, prefix, port, data_dir, operators=operators, log_level=log_level)
        asyncio.run(_until_signal(run))
    except (fleets.NoCrdsError, kopf.LoginError, kube.KubeError, listening.ListenError) as exc:
        raise click.ClickException(f"dev-fleet on {kubeconfig}: {exc}") from exc
