"""Commands of the control plane: ``dap control ...`` and ``dap register``.

Thin click shells: they parse options (each also read from ``DAP_<OPTION>``), configure JSON
logging, open the store or an HTTP client, and leave the work to the modules of this package.
Exit codes: 0 done, 1 failed (message on stderr), 2 usage (click's own, and a refused start).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import click

from dap import embedded, listening, logs, tracing
from dap.config import canonical
from dap.control import errors
from dap.control.artifacts import packing, registration
from dap.control.cli import auditing, controls, freezing, policies
from dap.control.ids import ClusterId
from dap.control.serving import app as control_app
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.supply import transparency
from dap.control.trust import signing

MIB = 1024 * 1024
HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


@click.group()
def control() -> None:
    """Control plane: serve (region, cluster, standalone), keys, revoke."""


def _signer(value: str | None, dev: bool, mode: str) -> signing.Signer | None:
    if mode == "cluster":
        return None
    if value:
        path = Path(value)
        if path.is_file():
            return signing.Signer.load(path)
        if HEX_KEY.fullmatch(value.strip()):
            return signing.Signer.from_seed_hex(value)
        raise click.UsageError(f"--signing-key {value!r} is neither a key file nor 64 hex characters")
    if dev:
        return signing.Signer.generate()
    raise click.UsageError(
        f"refusing to start: {mode} mode signs artifacts and needs --signing-key FILE (or DAP_SIGNING_KEY); "
        "create one with `dap control key generate --out FILE`, or use --dev for an ephemeral key"
    )


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not key=value", param_hint="--label")
        labels[key] = val
    return labels


@control.command()
@click.option(
    "--mode", type=click.Choice(settings.MODES), default="standalone", show_default=True, envvar="DAP_MODE"
)
@click.option("--dev", is_flag=True, envvar="DAP_DEV", help="ephemeral signing key, /v1/poll, no mutual TLS")
@click.option("--host", default="0.0.0.0", show_default=True, envvar="DAP_HOST")
@click.option("--port", type=int, default=8443, show_default=True, envvar="DAP_PORT")
@click.option(
    "--db", envvar="DAP_DB", help="postgresql:// DSN; embedded Postgres when absent (dev, standalone)"
)
@click.option("--control-db", envvar="DAP_CONTROL_DB", hidden=True, help="accepted and ignored (spec)")
@click.option("--region-url", envvar="DAP_REGION_URL", help="cluster mode: the region control to sync from")
@click.option("--signing-key", envvar="DAP_SIGNING_KEY", help="key file (or 64 hex characters)")
@click.option("--cluster-id", default="local", show_default=True, envvar="DAP_CLUSTER_ID")
@click.option("--label", multiple=True, envvar="DAP_LABEL", help="cluster label key=value (repeatable)")
@click.option("--max-workspaces", type=int, default=100, show_default=True, envvar="DAP_MAX_WORKSPACES")
@click.option(
    "--environment", envvar="DAP_ENVIRONMENT", help="snapshot environment (production; dev: development)"
)
@click.option(
    "--trusted-key", multiple=True, envvar="DAP_TRUSTED_KEYS", help="cluster: region public key (hex)"
)
@click.option("--snapshot-ttl", type=float, default=3600.0, show_default=True, envvar="DAP_SNAPSHOT_TTL")
@click.option("--sync-interval", type=float, default=30.0, show_default=True, envvar="DAP_SYNC_INTERVAL")
@click.option("--relay-interval", type=float, default=60.0, show_default=True, envvar="DAP_RELAY_INTERVAL")
@click.option("--max-file-size", type=int, default=8 * MIB, show_default=True, envvar="DAP_MAX_FILE_SIZE")
@click.option("--max-total-size", type=int, default=64 * MIB, show_default=True, envvar="DAP_MAX_TOTAL_SIZE")
@click.option(
    "--data-dir", type=click.Path(path_type=Path), default=Path(".dap") / "control-pg", show_default=True
)
@click.option("--log-level", type=click.Choice(sorted(logs.LEVELS)), default="info", envvar="DAP_LOG_LEVEL")
def serve(**opts: Any) -> None:
    """Run the control binary in region, cluster or standalone mode."""
    logs.configure(opts["log_level"])
    tracing.configure("dap-control")  # OTEL_* variables; off (and never imported) unless they ask
    mode = opts["mode"]
    if mode == "cluster" and not opts["region_url"]:
        raise click.UsageError("cluster mode needs --region-url")
    if not opts["db"] and not (opts["dev"] or mode == "standalone"):
        raise click.UsageError(f"{mode} mode needs --db postgresql://...")
    signer = _signer(opts["signing_key"], opts["dev"], mode)
    config = settings.Settings(
        mode=mode,
        dev=opts["dev"],
        environment=opts["environment"] or ("development" if opts["dev"] else "production"),
        snapshot_ttl=timedelta(seconds=opts["snapshot_ttl"]),
        limits=registration.Limits(
            max_file_bytes=opts["max_file_size"], max_total_bytes=opts["max_total_size"]
        ),
        region_url=opts["region_url"],
        cluster_id=ClusterId(opts["cluster_id"]),
        labels=_labels(opts["label"]),
        max_workspaces=opts["max_workspaces"],
        sync_interval=opts["sync_interval"],
        relay_interval=opts["relay_interval"],
        trusted_keys=tuple(signing.parse_public_key(k) for k in opts["trusted_key"]),
    )
    handle = None
    dsn = opts["db"]
    if not dsn:
        try:
            dsn, handle = embedded.start(opts["data_dir"])
        except embedded.EmbeddedPostgresError as exc:
            raise click.ClickException(str(exc)) from exc
    try:
        asyncio.run(_serve(config, dsn, signer, opts["host"], opts["port"]))
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc
    except listening.ListenError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if handle is not None:
            handle.cleanup()


async def _serve(
    config: settings.Settings, dsn: str, signer: signing.Signer | None, host: str, port: int
) -> None:
    pool = await store.connect(dsn)
    try:
        web_app = control_app.build_app(config=config, pool=pool, signer=signer)
        await control_app.serve(web_app, host=host, port=port)
    finally:
        await pool.close()


control.add_command(controls.region_control)
control.add_command(controls.cluster_control)
control.add_command(controls.dev_fleet)
control.add_command(auditing.log_group)
control.add_command(freezing.freeze_group)
control.add_command(policies.policy_group)


@control.group()
def key() -> None:
    """Signing keys (ed25519)."""


@key.command("generate")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="write the key file here (mode 0600)"
)
def key_generate(out: Path | None) -> None:
    """Create a signing key; print its public key and key id (the secret only without --out)."""
    signer = signing.Signer.generate()
    entry = signer.public_key_entry()
    if out is None:
        click.echo(json.dumps(entry), err=True)
        click.echo(signer.seed_hex())
        return
    try:
        signer.save(out)
    except FileExistsError as exc:
        raise click.ClickException(f"{out} exists; refusing to overwrite a key") from exc
    click.echo(json.dumps({**entry, "file": str(out)}))


@key.command("show")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def key_show(file: Path) -> None:
    """Print the public key and key id of a key file."""
    try:
        signer = signing.Signer.load(file)
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc
    click.echo(json.dumps(signer.public_key_entry()))


@control.command()
@click.argument("artifact_id")
@click.option(
    "--db", required=True, envvar="DAP_DB", help="postgresql:// DSN of the region or standalone control"
)
def revoke(artifact_id: str, db: str) -> None:
    """Mark an artifact revoked; its workspaces fall back to the previous good version."""
    try:
        moved = asyncio.run(_revoke(artifact_id, db))
    except errors.ControlError as exc:
        raise click.ClickException(exc.detail) from exc
    click.echo(json.dumps({"artifact_id": artifact_id, "status": "revoked", "moved": moved}))


async def _revoke(artifact_id: str, dsn: str) -> list[str]:
    pool = await store.connect(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn, conn.transaction():
            row = await store.artifact(conn, artifact_id)
            moved: list[str] = list(await store.revoke(conn, artifact_id))
            if row is not None and row.status == "active":
                # Logged without a signature here; the serving control signs the new head.
                entry = transparency.revocation_entry(
                    app=row.app, version=row.version, artifact_id=artifact_id, at=datetime.now(UTC)
                )
                await transparency.append(conn, [entry], signer=None)
            return moved
    finally:
        await pool.close()


# --- dap register ----------------------------------------------------------------------------


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--control-url", required=True, envvar="DAP_CONTROL_URL", help="region or standalone control")
@click.option(
    "--app",
    "app_name",
    help="app name; without it, the app the workspaces are already bound to, else the directory's name",
)
@click.option("--workspace", multiple=True, help="bind this workspace to the app (repeatable)")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="seconds for the whole upload")
@click.option(
    "--approve-with",
    "approve_with",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="approve the content with this key file (repeatable; the app's signing policy counts them)",
)
@click.option(
    "--approval", "approval_texts", multiple=True, help="an approval JSON from `dap control policy approve`"
)
def register(
    directory: Path,
    control_url: str,
    app_name: str | None,
    workspace: tuple[str, ...],
    timeout: float,
    approve_with: tuple[Path, ...],
    approval_texts: tuple[str, ...],
) -> None:
    """Register a directory (manifests, scripts, app code, assets) with a control plane."""
    files = packing.collect(directory)
    if not files:
        raise click.ClickException(f"{directory} holds no file to register")
    default = re.sub(r"[^a-z0-9_-]", "-", directory.resolve().name.lower()).strip("-") or "app"
    app = app_name or default
    found: list[Any] = []
    for text in approval_texts:
        try:
            found.append(json.loads(text))
        except ValueError as exc:
            raise click.BadParameter(f"{text[:60]!r} is not JSON", param_hint="--approval") from exc
    if approve_with:
        digest = canonical.aggregate_sha256({p: canonical.file_sha256(c) for p, c in files.items()})
        found += [policies.approval(key, app, digest) for key in approve_with]
    body = json.dumps(
        {
            "approvals": found,
            # Without --app the name is only a default: a bound workspace keeps its app.
            ("app" if app_name else "default_app"): app,
            "workspaces": list(workspace),
            "files": [{"path": p, "content": base64.b64encode(c).decode("ascii")} for p, c in files.items()],
        }
    ).encode()
    size = sum(len(c) for c in files.values())
    as_app = f"app {app!r}" if app_name else f"app {app!r} unless the workspaces are bound to another"
    click.echo(f"registering {len(files)} files ({size / MIB:.2f} MiB) as {as_app}", err=True)
    tracing.configure("dap-register")  # OTEL_* variables: the registration's trace starts here
    try:
        upload = _upload(control_url.rstrip("/") + "/v1/artifacts", body, timeout, app)
        status, answer = asyncio.run(upload)
    finally:
        tracing.flush()  # a short-lived process: its span leaves before it exits
    if status == 200:
        kept = answer.get("app_kept_for") or []
        if kept and answer.get("app") != app:
            click.echo(
                f"workspace {', '.join(kept)} is bound to app {answer['app']!r}: registered as its next "
                f"version (to move it to app {app!r}, give --app {app})",
                err=True,
            )
        click.echo(f"app:         {answer.get('app', app)}")
        click.echo(f"artifact_id: {answer['artifact_id']}")
        click.echo(f"version:     {answer['version']}")
        click.echo(f"sha256:      {answer['sha256']}")
        if not answer.get("created", True):
            click.echo("(unchanged: identical content was already registered)", err=True)
        for binding in answer.get("deployments", []):
            where = binding.get("cluster_id") or f"unrouted: {binding.get('error')}"
            click.echo(f"workspace {binding['workspace_id']} -> {where}", err=True)
        return
    click.echo(f"registration refused ({status}): {answer.get('detail', answer)}", err=True)
    for item in answer.get("errors", []):
        where = item.get("file") or ""
        if item.get("document") is not None:
            where += f"#{item['document']}"
        click.echo(
            f"  {where} {item.get('path', '')}: {item.get('message', '')}".replace("   ", " "), err=True
        )
    sys.exit(1)


async def _chunks(body: bytes, chunk: int = 256 * 1024) -> AsyncIterator[bytes]:
    """Stream the body, printing progress every tenth when it is larger than 1 MiB."""
    shown = 0
    for start in range(0, len(body), chunk):
        yield body[start : start + chunk]
        sent = min(start + chunk, len(body))
        tenth = 10 * sent // len(body)
        if len(body) > MIB and tenth > shown:
            shown = tenth
            click.echo(f"  uploaded {sent / MIB:.1f}/{len(body) / MIB:.1f} MiB ({10 * tenth}%)", err=True)


async def _upload(url: str, body: bytes, seconds: float, app: str) -> tuple[int, dict[str, Any]]:
    with tracing.span("dap register", kind="client", attributes={"dap.app": app}) as span:
        status, answer = await _post(url, body, seconds)
        tracing.annotate(
            span, **{"http.response.status_code": status, "dap.artifact_id": answer.get("artifact_id")}
        )
        tracing.failed(span, status)
        return status, answer


async def _post(url: str, body: bytes, seconds: float) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    tracing.inject(headers)  # the control's registration span continues this trace
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as session,
            session.post(url, data=_chunks(body), headers=headers) as response,
        ):
            text = await response.text()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"detail": text[:500]}
            return response.status, answer if isinstance(answer, dict) else {"detail": answer}
    except (aiohttp.ClientError, TimeoutError) as exc:
        click.echo(f"cannot reach the control plane at {url}: {exc or type(exc).__name__}", err=True)
        click.echo("check --control-url and that `dap control serve` is running", err=True)
        sys.exit(1)
