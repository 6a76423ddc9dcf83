"""``dap dev``: the whole pipeline in one process tree on a laptop.

1. Postgres: ``--dsn`` as given, else the embedded server in ``<data-dir>/pg`` with a database
   of the spec directory's own (``data``: a second spec never meets the first one's tables);
   ``--reset`` forgets that database and the spec's pod state first;
2. the control plane in standalone dev mode, as a child process (``control``, imported as ``plane``);
3. registration of ``--spec`` (``POST /v1/artifacts``, binding ``--workspace``);
4. one resource pod, in this process, serving it at ``http://127.0.0.1:8080/<workspace>/api/...``
   with the dev HS256 secret of ``tokens`` (so ``dap token`` makes tokens it accepts); it long-polls,
   so a registration reaches it at once;
5. the wait for that version ends as soon as the pod serves it (same artifact, or the same
   content under another id) or fails to load it; a failure is one line saying what to do; once
   served, the spec's ``seed/`` records are loaded into the workspace (``seeding``: idempotent, so
   a second start loads nothing twice); with ``--auto-approve`` approval gates are granted at
   once (``approving``);
6. the banner (``banner``): addresses that answer, a token, curl lines;
7. with ``--watch``: file modification times are polled every second (no new dependency),
   starting from the moment the files were first read, so an edit saved while the first version
   was still loading is not lost; a change re-registers the directory and wakes the pod;
8. Ctrl-C (or SIGTERM), at any moment, stops the pod, then the control plane, then Postgres,
   saying what it stops; a second Ctrl-C is not needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import click

from dap import embedded, resource_pod
from dap.dev import approving, banner, data, seeding, tokens
from dap.dev import control as plane
from dap.resource_pod import errors, loading
from dap.server import options

log = logging.getLogger(__name__)

DEV_ADMIN_SECRET = "dap-dev-admin-secret"
WATCH_EVERY = 1.0
SETTLE = 0.3  # seconds after a change before reading: let an editor finish writing
SERVE_SHUTDOWN = 1.0  # seconds in-flight requests get at Ctrl-C
SKIPPED = (".", "__pycache__", "node_modules")
Phase = resource_pod.Phase


@dataclass(frozen=True)
class DevConfig:
    spec_dir: Path
    workspace: str
    addr: str
    admin_addr: str
    control_port: int
    dsn: str | None
    data_dir: Path
    pull_interval: float
    watch: bool
    log_level: str
    reset: bool = False
    sidecar_endpoint: str | None = None  # the app process (the bridge in the pod), as in dap serve
    runtime: str | None = None  # child-process mode: the pod starts the app
    app_dir: Path | None = None
    invoke_timeout: str = "30s"
    auto_approve: bool = False  # approval gates granted at once (``approving``); off: testable by hand
    seed: bool = True  # load ``<spec>/seed`` once served (``seeding``); --no-seed starts empty


def say(text: str) -> None:
    click.echo(text)


def collect(directory: Path) -> dict[str, bytes]:
    """Every regular file under ``directory`` (hidden files and caches skipped), by relative path."""
    files: dict[str, bytes] = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if any(part.startswith(SKIPPED) for part in relative.parts) or not path.is_file():
            continue
        files[relative.as_posix()] = path.read_bytes()
    return files


def fingerprint(directory: Path) -> dict[str, tuple[int, int]]:
    """``path → (mtime_ns, size)``: what ``--watch`` compares."""
    out: dict[str, tuple[int, int]] = {}
    for path in directory.rglob("*"):
        relative = path.relative_to(directory)
        if any(part.startswith(SKIPPED) for part in relative.parts):
            continue
        with contextlib.suppress(OSError):
            stat = path.stat()
            if path.is_file():
                out[relative.as_posix()] = (stat.st_mtime_ns, stat.st_size)
    return out


# --- waiting for a registered version ------------------------------------------------------------


class Outcome(enum.Enum):
    SERVED = "served"
    FAILED = "failed"
    PENDING = "pending"


def outcome(status: resource_pod.Status, artifact_id: str, sha256: str) -> Outcome:
    """Where the pod stands with the registered artifact. Pure.

    Served: it runs that artifact, or one with the same content (a copy of a spec registers the
    same files under another app, and the pod rightly keeps what it runs). Failed: its last
    attempt at that artifact failed or was rolled back.
    """
    failure = status.failure
    if (
        status.phase in (Phase.FAILED, Phase.ROLLED_BACK)
        and failure is not None
        and (failure.artifact_id == artifact_id or failure.sha256 == sha256)
    ):
        return Outcome.FAILED
    running = status.running
    if (
        status.phase in (Phase.LOADED, Phase.UP_TO_DATE)
        and running is not None
        and (running.artifact_id == artifact_id or running.sha256 == sha256)
    ):
        return Outcome.SERVED
    return Outcome.PENDING


async def wait_for(pod: resource_pod.Running, answer: Mapping[str, Any], within: float) -> Outcome:
    """Poll the pod's status until the registered version is served or failed, or ``within`` ends."""
    deadline = time.monotonic() + within
    while True:
        now = outcome(pod.pod.status, answer["artifact_id"], answer["sha256"])
        if now is not Outcome.PENDING or time.monotonic() >= deadline:
            return now
        await asyncio.sleep(0.02)


async def destructive_changes(pod: resource_pod.Running, files: Mapping[str, bytes]) -> list[str]:
    """The schema changes loading ``files`` would need and the pod refuses to make by itself."""
    try:
        return await loading.refused_steps(pod.server.app, await loading.catalog_for(files))
    except Exception as exc:  # only an explanation: never let it hide the failure it explains
        log.warning("cannot plan the schema change", extra={"ctx": {"error": f"{type(exc).__name__}: {exc}"}})
        return []


async def explain_failure(
    config: DevConfig, pod: resource_pod.Running, answer: Mapping[str, Any], files: Mapping[str, bytes]
) -> list[str]:
    """What went wrong with a registered version, the first line saying what to do."""
    version = answer.get("version")
    changes = await destructive_changes(pod, files)
    if not changes:
        return [f"dap dev: version {version} was not loaded: {pod.pod.status.message}"]
    dap = banner.dap_command()
    if config.dsn:
        todo = (
            "the --dsn database is yours, so dap dev changes nothing in it: point --dsn at an empty "
            f"database, or apply declared changes with `{dap} migrate --spec {config.spec_dir} --dsn ...`"
        )
    else:
        todo = (
            f"to start this spec's data afresh, run `{dap} dev --spec {config.spec_dir} --reset` "
            f"(make dev SPEC={config.spec_dir} ARGS=--reset)"
        )
    return [
        f"dap dev: version {version} was not loaded: it would drop stored data; {todo}",
        f"  {len(changes)} destructive change(s): {'; '.join(changes)}",
    ]


async def report(
    config: DevConfig,
    pod: resource_pod.Running,
    answer: Mapping[str, Any],
    files: Mapping[str, bytes],
    started: float,
) -> Outcome:
    result = await wait_for(pod, answer, config.pull_interval + 10)
    if result is Outcome.SERVED:
        say(f"  now serving version {answer['version']} ({time.monotonic() - started:.2f}s)")
    elif result is Outcome.FAILED:
        for line in await explain_failure(config, pod, answer, files):
            say(line)
    else:
        say(f"  version {answer['version']} registered, not served yet: {pod.pod.status.message}")
    return result


# --- the watch loop --------------------------------------------------------------------------------


async def watch(
    config: DevConfig,
    control: plane.Control,
    pod: resource_pod.Running,
    session: aiohttp.ClientSession,
    seen: dict[str, tuple[int, int]],
) -> None:
    """Re-register on every change since ``seen`` (taken before the files were last read)."""
    while True:
        await asyncio.sleep(WATCH_EVERY)
        now = await asyncio.to_thread(fingerprint, config.spec_dir)
        if now == seen:
            continue
        await asyncio.sleep(SETTLE)
        seen = await asyncio.to_thread(fingerprint, config.spec_dir)  # before reading: nothing slips by
        files = await asyncio.to_thread(collect, config.spec_dir)
        say(f"change in {config.spec_dir}: registering")
        started = time.monotonic()
        answer = await control.register(
            session, app=plane.app_name(config.spec_dir), workspace=config.workspace, files=files
        )
        if answer is None:
            continue
        served = outcome(pod.pod.status, answer["artifact_id"], answer["sha256"]) is Outcome.SERVED
        if served and not answer.get("created", True):
            say(f"  (content unchanged: serving version {answer['version']})")
            continue
        # the same content as a version the pod failed on: say again why, rather than "unchanged"
        await control.poll(session)
        await report(config, pod, answer, files, started)


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class Parts:
    """What has been started so far; ``stop`` ends it in reverse order, saying what it stops."""

    pg_dir: Path | None = None
    pg: Any = None
    control: plane.Control | None = None
    pod: resource_pod.Running | None = None
    watcher: asyncio.Task[None] | None = None
    approver: asyncio.Task[None] | None = None

    async def stop(self, session: aiohttp.ClientSession) -> None:
        began = time.monotonic()
        for task in (self.watcher, self.approver):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        control, pg, pg_dir = self.control, self.pg, self.pg_dir
        steps: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
            ("the pod (in-flight requests finish)", self.pod.stop if self.pod else None),
            ("the control plane", (lambda: control.stop(session)) if control else None),
            (
                "the embedded Postgres",
                (lambda: asyncio.to_thread(embedded.stop, pg, pg_dir)) if pg is not None and pg_dir else None,
            ),
        ]
        failed: BaseException | None = None
        for what, action in steps:  # every step, whatever the one before did: nothing outlives dev
            try:
                await _step(what, action)
            except Exception as exc:
                say(f"  stopping {what} failed: {exc}")
                failed = failed or exc
        say(f"stopped in {time.monotonic() - began:.1f}s")
        if failed is not None:
            raise failed


async def _step(what: str, action: Callable[[], Awaitable[None]] | None) -> None:
    if action is None:
        return
    click.echo(f"stopping {what} …", nl=False)
    began = time.monotonic()
    try:
        await action()
    finally:
        say(f" {time.monotonic() - began:.1f}s")


async def _database(config: DevConfig, place: data.Place, parts: Parts) -> tuple[str, str]:
    """``(dsn, where the data is)``: the given DSN, or the spec's own embedded database."""
    if config.dsn:
        if config.reset:
            raise errors.ConfigError(
                "--reset forgets a spec's embedded database; with --dsn the database is yours: "
                "empty it yourself"
            )
        return config.dsn, f"the --dsn database; pod state in {place.pod_state}"
    parts.pg_dir = config.data_dir / "pg"
    say(f"starting the embedded Postgres in {parts.pg_dir} …")
    server_dsn, parts.pg = await asyncio.to_thread(embedded.start, parts.pg_dir)
    if config.reset:
        forgot = await data.reset(server_dsn, place)
        say(f"--reset: {'forgot' if forgot else 'nothing stored yet for'} the data of {config.spec_dir}")
    dsn = await data.ensure_database(server_dsn, place)
    where = (
        f"database {place.database} in {parts.pg_dir}, pod state in {place.pod_state} (--reset starts afresh)"
    )
    return dsn, where


async def _serve(config: DevConfig, parts: Parts, session: aiohttp.ClientSession) -> int | None:
    """Start everything; return an exit code to stop at once, ``None`` to serve until Ctrl-C."""
    place = data.place_for(config.spec_dir, config.data_dir)
    dsn, where = await _database(config, place, parts)
    control = plane.Control(
        port=config.control_port,
        dsn=dsn,
        key_file=config.data_dir / "control-signing.key",
        log_level=config.log_level,
        say=say,
    )
    parts.control = control
    say(f"starting the control plane on {control.url} …")
    await control.start(session)
    seen = await asyncio.to_thread(fingerprint, config.spec_dir)  # before reading: see watch()
    files = await asyncio.to_thread(collect, config.spec_dir)
    say(f"registering {config.spec_dir} ({len(files)} files) …")
    started = time.monotonic()
    answer = await control.register(
        session, app=plane.app_name(config.spec_dir), workspace=config.workspace, files=files
    )
    if answer is None and not config.watch:
        return 1
    opts = options.check(
        dsn=dsn,
        addr=config.addr,
        metrics_addr=config.admin_addr,
        jwt_secret=tokens.DEV_SECRET,
        jwt_issuer=tokens.DEV_ISSUER,
        cors_origins=[f"http://{config.addr}", "http://localhost:8080", "http://localhost:5173"],
        admin_secret=DEV_ADMIN_SECRET,
        sidecar_endpoint=config.sidecar_endpoint,
        runtime=config.runtime,
        app_dir=config.app_dir,
        invoke_timeout=config.invoke_timeout,
    )
    pod_config = resource_pod.Settings(
        control_url=control.url,
        workspace=config.workspace,
        state_dir=place.pod_state,
        pull_interval=config.pull_interval,
        dev=True,
        fetch_keys=True,
        long_poll=True,
        pod_name="dap-dev",
        cluster_id="local",
    )
    say("starting the resource pod …")
    parts.pod = pod = await resource_pod.start(opts, pod_config, shutdown_timeout=SERVE_SHUTDOWN)
    served = answer is not None and await report(config, pod, answer, files, started) is Outcome.SERVED
    if served and config.seed:
        await seeding.load(config.spec_dir, dsn, config.workspace, loading.current(pod.server.app), say)
    if config.auto_approve:
        parts.approver = asyncio.create_task(approving.run(dsn, config.workspace, pod, say))
    code = await _setup_code(session, pod.server.urls.get("admin"), config.workspace)
    _banner(config, control, pod, where, code)
    if config.watch:
        parts.watcher = asyncio.create_task(watch(config, control, pod, session, seen))
    return None


async def _setup_code(session: aiohttp.ClientSession, admin: str | None, workspace: str) -> str | None:
    """A fresh one-time setup code for the workspace's first admin; ``None`` once it has a user or data."""
    if admin is None:
        return None
    async with session.post(
        f"{admin}/workspaces/{workspace}/setup-code", headers={"Authorization": f"Bearer {DEV_ADMIN_SECRET}"}
    ) as resp:
        if resp.status != 201:  # 409: setup is closed for good; 404: not registered yet
            return None
        code: str = (await resp.json())["setup_code"]
        return code


def _banner(
    config: DevConfig, control: plane.Control, pod: resource_pod.Running, where: str, setup_code: str | None
) -> None:
    lines = banner.render(
        workspace=config.workspace,
        base=loading.local_url(pod.api_url),
        web_dir=pod.server.web_dir,
        status=pod.pod.status.as_json(),
        catalog=loading.current(pod.server.app),
        control_url=control.url,
        admin=pod.server.urls.get("admin"),
        admin_secret=DEV_ADMIN_SECRET,
        data=where,
        watch=config.watch,
        setup_code=setup_code,
    )
    for line in lines:
        say(line)
    sys.stdout.flush()


async def run(config: DevConfig) -> int:
    """Run until Ctrl-C; return the exit code. Ctrl-C during start-up stops what has started."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parts = Parts()
    async with aiohttp.ClientSession() as session:
        starting = asyncio.create_task(_serve(config, parts, session))
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():  # Ctrl-C while starting
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                say("")
                return 130
            code = starting.result()
            if code is not None:
                return code
            await stopping
            say("")
            return 0
        finally:
            stopping.cancel()
            await parts.stop(session)
