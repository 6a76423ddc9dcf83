"""``dap control region-control`` and ``dap control cluster-control``: the two in-cluster controls.

Each logs in as kopf does (in-cluster ServiceAccount, else ``$KUBECONFIG``) and runs until
SIGINT/SIGTERM. Options are also read from ``DAP_<OPTION>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any

import click

from dap import logs
from dap.control.kube import member, region


async def _until_signal(work: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


@click.command("region-control")
@click.option(
    "--db", envvar="DAP_DB", required=True, help="postgresql:// DSN of the region's control database"
)
@click.option(
    "--namespace", default="", envvar="DAP_NAMESPACE", help="watch Workspaces here only (default all)"
)
@click.option("--interval", type=float, default=5.0, show_default=True, envvar="DAP_INTERVAL")
@click.option("--leader-elect", is_flag=True, envvar="DAP_LEADER_ELECT", help="one active replica (Lease)")
@click.option("--lease-namespace", default="dap-system", show_default=True, envvar="DAP_LEASE_NAMESPACE")
@click.option(
    "--kubeconfig", default="", help="log in with this kubeconfig (default: in-cluster, $KUBECONFIG)"
)
@click.option("--log-level", type=click.Choice(sorted(logs.LEVELS)), default="info", envvar="DAP_LOG_LEVEL")
def region_control(**opts: Any) -> None:
    """Route management Workspaces over Cluster resources (rule 5); write their status."""
    logs.configure(opts.pop("log_level"))
    options = region.Options(dsn=opts.pop("db"), **opts)
    asyncio.run(_until_signal(region.run(options)))


@click.command("cluster-control")
@click.option("--region-url", envvar="DAP_REGION_URL", required=True, help="the region's control API")
@click.option("--cluster", "--cluster-id", envvar="DAP_CLUSTER_ID", required=True, help="this cluster's name")
@click.option(
    "--namespace", default="", envvar="DAP_NAMESPACE", help="keep placements here (default: their own)"
)
@click.option("--interval", type=float, default=10.0, show_default=True, envvar="DAP_INTERVAL")
@click.option("--leader-elect", is_flag=True, envvar="DAP_LEADER_ELECT", help="one active replica (Lease)")
@click.option("--lease-namespace", default="dap-system", show_default=True, envvar="DAP_LEASE_NAMESPACE")
@click.option(
    "--kubeconfig", default="", help="log in with this kubeconfig (default: in-cluster, $KUBECONFIG)"
)
@click.option("--log-level", type=click.Choice(sorted(logs.LEVELS)), default="info", envvar="DAP_LOG_LEVEL")
def cluster_control(**opts: Any) -> None:
    """Pull this cluster's placements from the region and keep them as Workspaces."""
    logs.configure(opts.pop("log_level"))
    options = member.Options(**opts)
    asyncio.run(_until_signal(member.run(options)))
