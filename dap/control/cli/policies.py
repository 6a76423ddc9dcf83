"""``dap control policy set|show|remove|promote|approve``: who signs what, and promotion rules.

``set`` makes a k-of-n signing policy for an app; ``promote`` a promotion rule (``promotions``).

``set``/``show``/``remove`` work on the control's database (like ``revoke``) and log every change
in the transparency log. ``approve`` is the author's tool: it prints the approval of a directory's
content (or of an aggregate sha256) by one key file, to pass to ``dap register --approval``;
``dap register --approve-with KEYFILE`` does the same in one step.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dap.config import approvals, canonical
from dap.control import errors
from dap.control.artifacts import packing
from dap.control.cli import databases
from dap.control.storage import store
from dap.control.supply import freezes, policies, promotions
from dap.control.trust import signing


def aggregate_of(directory: Path) -> str:
    """The aggregate sha256 ``dap register`` would send for ``directory``."""
    files = packing.collect(directory)
    return canonical.aggregate_sha256({p: canonical.file_sha256(c) for p, c in files.items()})


def approval(key_file: Path, app: str, sha256: str) -> dict[str, str]:
    try:
        seed = bytes.fromhex(signing.Signer.load(key_file).seed_hex())
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc
    return approvals.approve(seed, app, sha256)


@click.group("policy")
def policy_group() -> None:
    """Signing policies: which keys must approve an app's artifacts, and how many (k of n)."""


@policy_group.command("set")
@click.option("--app", required=True)
@click.option(
    "--key", "keys", multiple=True, required=True, help="an approver's public key (hex), repeatable"
)
@click.option("--threshold", type=int, required=True, help="how many of the keys must approve (k)")
@databases.DB
def set_command(app: str, keys: tuple[str, ...], threshold: int, db: str) -> None:
    """Require ``threshold`` approvals by ``--key``s for every new artifact of ``app``."""
    try:
        policy = policies.check(app, [signing.parse_public_key(k) for k in keys], threshold)
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc

    async def work(conn: store.Conn) -> None:
        await policies.put(conn, policy)

    databases.in_transaction(db, work)
    click.echo(json.dumps(policy.as_json()))


@policy_group.command("show")
@click.option("--app", help="only this app")
@databases.DB
def show(app: str | None, db: str) -> None:
    """Print the signing policies and promotion rules (one JSON object per line)."""

    async def work(conn: store.Conn) -> tuple[list[policies.Policy], list[promotions.Rule]]:
        found = [p for p in await policies.listing(conn) if app is None or p.app == app]
        rules = [r for r in await policies.promotion_rules(conn) if app is None or r.app == app]
        if app is not None and not found and not rules:
            raise errors.NotFoundError(f"app {app} has no policy")
        return found, rules

    found, rules = databases.in_transaction(db, work)
    for policy in found:
        click.echo(json.dumps(policy.as_json()))
    for rule in rules:
        click.echo(json.dumps({"promotion": rule.as_json()}))


@policy_group.command("remove")
@click.option("--app", required=True)
@databases.DB
def remove(app: str, db: str) -> None:
    """Drop an app's policy (logged)."""

    async def work(conn: store.Conn) -> None:
        await policies.remove(conn, app)

    databases.in_transaction(db, work)
    click.echo(json.dumps({"app": app, "policy": None}))


@policy_group.command("promote")
@click.option("--app", required=True)
@click.option(
    "--from-workspace", "sources", multiple=True, required=True, help="a staging workspace (repeatable)"
)
@click.option(
    "--to-workspace", "targets", multiple=True, required=True, help="a production workspace (repeatable)"
)
@click.option("--after", "soak", required=True, help="time in staging first: 90s, 30m, 2h, 1d")
@databases.DB
def promote(app: str, sources: tuple[str, ...], targets: tuple[str, ...], soak: str, db: str) -> None:
    """An artifact reaches the --to-workspaces only after it ran healthy --after long in --from."""
    try:
        rule = promotions.Rule(app, tuple(sources), tuple(targets), freezes.parse_duration(soak))
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc

    async def work(conn: store.Conn) -> None:
        await policies.put_promotion(conn, rule)

    databases.in_transaction(db, work)
    click.echo(json.dumps(rule.as_json()))


@policy_group.command("approve")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--app", required=True)
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--sha256", help="the aggregate to approve (instead of --dir)")
def approve(key_file: Path, app: str, directory: Path | None, sha256: str | None) -> None:
    """Print an approval ``{key_id, signature}`` of a directory's content for ``app``."""
    if (directory is None) == (sha256 is None):
        raise click.UsageError("give exactly one of --dir or --sha256")
    digest = aggregate_of(directory) if directory is not None else str(sha256)
    click.echo(json.dumps(approval(key_file, app, digest)))
