"""``dap control log show|verify|monitor``: read and check a control's transparency log over HTTP.

They need the control's URL and its public key (``--trusted-key``, repeatable, or
``DAP_TRUSTED_KEYS``); without a key they trust ``/v1/keys`` on first use and say so. Output is
JSON: one object per line for entries, one summary object on stdout at the end. Exit 1 with the
reason on stderr when a check fails (a fork, a forged head, entries that do not give the root).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import click

from dap.control import errors
from dap.control.supply import monitoring
from dap.control.trust import signing

T = TypeVar("T")


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--trusted-key", multiple=True, envvar="DAP_TRUSTED_KEYS", help="the control's public key (hex)"
    )(command)
    return click.option(
        "--control-url", required=True, envvar="DAP_CONTROL_URL", help="region or standalone"
    )(command)


async def _client(session: aiohttp.ClientSession, url: str, keys: tuple[str, ...]) -> monitoring.LogClient:
    trusted = {signing.key_id(k): k for k in (signing.parse_public_key(v) for v in keys)}
    client = monitoring.LogClient(session, url, trusted)
    if not trusted:
        ids = await client.trust_published_keys()
        click.echo(f"no --trusted-key: trusting the control's published keys {', '.join(ids)}", err=True)
    return client


def _run(work: Callable[[monitoring.LogClient], Awaitable[T]], url: str, keys: tuple[str, ...]) -> T:
    async def main() -> T:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            return await work(await _client(session, url, keys))

    try:
        return asyncio.run(main())
    except errors.LogInconsistentError as exc:
        click.echo(f"transparency log check FAILED: {exc.detail}", err=True)
        sys.exit(1)
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc


def _printer(app: str | None) -> Callable[[dict[str, Any]], None]:
    def show(item: dict[str, Any]) -> None:
        if app is None or item.get("entry", {}).get("app") == app:
            click.echo(json.dumps({"index": item["index"], "entry": item["entry"]}, sort_keys=True))

    return show


@click.group("log")
def log_group() -> None:
    """The transparency log: registrations, revocations and keys (RFC 9162 Merkle tree)."""


@log_group.command("show")
@_options
@click.option("--app", help="only this app's entries")
@click.option("--start", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True, help="0: the head only")
def show(control_url: str, trusted_key: tuple[str, ...], app: str | None, start: int, limit: int) -> None:
    """Print the signed tree head and entries (signature checked, entries not folded)."""

    async def work(client: monitoring.LogClient) -> None:
        head = await client.head()
        click.echo(json.dumps({"tree_head": head}, sort_keys=True))
        if limit:
            end = min(head["tree_size"], start + limit) if app is None else head["tree_size"]
            for item in (await client.entries(start, end, app))[:limit]:
                _printer(None)(item)

    _run(work, control_url, trusted_key)


@log_group.command("verify")
@_options
@click.option("--artifact", "artifacts", multiple=True, help="also check this artifact's inclusion proof")
def verify(control_url: str, trusted_key: tuple[str, ...], artifacts: tuple[str, ...]) -> None:
    """Download every entry and check that they give the signed root; check artifacts' proofs."""

    async def work(client: monitoring.LogClient) -> dict[str, Any]:
        state = await client.audit(lambda _: None)
        checked = [{"artifact_id": a, **await client.check_artifact(a)} for a in artifacts]
        return {
            "verified": True,
            "tree_size": state.tree_size,
            "root_hash": state.head and state.head["root_hash"],
            "artifacts": checked,
        }

    click.echo(json.dumps(_run(work, control_url, trusted_key), sort_keys=True))


@log_group.command("monitor")
@_options
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="file keeping the last verified head between runs",
)
@click.option("--app", help="print only this app's entries (every entry is still checked)")
@click.option("--interval", type=float, default=60.0, show_default=True, help="seconds between rounds")
@click.option("--rounds", type=click.IntRange(min=0), default=0, help="stop after N rounds (0: forever)")
def monitor(
    control_url: str,
    trusted_key: tuple[str, ...],
    state_path: Path,
    app: str | None,
    interval: float,
    rounds: int,
) -> None:
    """Check the log's consistency over time and print its new entries (for an app)."""

    async def work(client: monitoring.LogClient) -> dict[str, Any]:
        state = monitoring.MonitorState.load(state_path)
        done = 0
        while True:
            before = state.tree_size
            state = await client.advance(state, _printer(app))
            state.save(state_path)
            click.echo(f"log consistent: {before} -> {state.tree_size} entries", err=True)
            done += 1
            if rounds and done >= rounds:
                return {"consistent": True, "tree_size": state.tree_size}
            await asyncio.sleep(interval)

    click.echo(json.dumps(_run(work, control_url, trusted_key), sort_keys=True))
