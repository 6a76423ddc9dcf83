"""``dap control freeze set|lift|list``: change freezes, on the control's database like ``revoke``.

A freeze holds deployment (``freezes``), not registration. Each command prints JSON on stdout
and exits 1 with the reason on stderr when refused (bad scope, end in the past, unknown or
already lifted freeze). Changes are logged in the transparency log and reach the serving
controls by NOTIFY; the serving control signs the new tree head.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from dap.control import errors
from dap.control.cli import databases
from dap.control.storage import store
from dap.control.supply import freezes, freezing


@click.group("freeze")
def freeze_group() -> None:
    """Change freezes: hold deployments of an app, workspace or environment until an end time."""


@freeze_group.command("set")
@click.option("--app", help="freeze this app's workspaces")
@click.option("--workspace", help="freeze this workspace")
@click.option("--environment", help="freeze every workspace of the controls serving this environment")
@click.option("--until", "until", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ"]))
@click.option("--for", "duration", help="length of the freeze: 90s, 30m, 2h, 1d, 1h30m")
@click.option("--reason", required=True, help="why (shown by list and written to the log)")
@databases.DB
def set_command(
    app: str | None,
    workspace: str | None,
    environment: str | None,
    until: datetime | None,
    duration: str | None,
    reason: str,
    db: str,
) -> None:
    """Declare a freeze; registrations still land (and are logged) but are not deployed."""
    now = datetime.now(UTC)
    if until is not None and until.tzinfo is None:
        until = until.replace(tzinfo=UTC)  # the ...Z form parses naive
    try:
        scope, target = freezes.check_scope(app, workspace, environment)
        end = freezes.ends_at(now=now, until=until, duration=duration)
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc

    async def work(conn: store.Conn) -> freezes.Freeze:
        return await freezing.set_freeze(
            conn, scope=scope, target=target, reason=reason, ends_at=end, now=now
        )

    click.echo(json.dumps(databases.in_transaction(db, work).as_json(now)))


@freeze_group.command("lift")
@click.argument("freeze_id")
@databases.DB
def lift(freeze_id: str, db: str) -> None:
    """End a freeze now; held workspaces converge on the next pull."""

    async def work(conn: store.Conn) -> freezes.Freeze:
        return await freezing.lift(conn, freeze_id)

    click.echo(json.dumps(databases.in_transaction(db, work).as_json(datetime.now(UTC))))


@freeze_group.command("list")
@click.option("--all", "include_ended", is_flag=True, help="also lifted and ended freezes")
@databases.DB
def list_command(include_ended: bool, db: str) -> None:
    """Print the active freezes (one JSON object per line)."""

    async def work(conn: store.Conn) -> list[freezes.Freeze]:
        return await freezing.listing(conn, include_ended=include_ended)

    now = datetime.now(UTC)
    for freeze in databases.in_transaction(db, work):
        click.echo(json.dumps(freeze.as_json(now)))
