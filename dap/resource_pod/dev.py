"""``dap dev``: the whole pipeline in one process tree on a laptop.

1. Postgres: ``--dsn``, else the embedded server in ``<data-dir>/pg`` (``dap.embedded``);
2. the control plane in standalone dev mode, as a **subprocess** (``dap control serve --mode
   standalone --dev``): the pod may not import ``dap.control``, and a child process is also what
   the pod meets in production — an HTTP peer. Its signing key is kept in
   ``<data-dir>/control-signing.key`` so artifacts registered in earlier runs still verify;
3. registration of ``--spec`` (``POST /v1/artifacts``, binding ``--workspace``);
4. one resource pod, in this process, serving it at ``http://127.0.0.1:8080/<workspace>/...``
   with a dev HS256 secret; it long-polls, so a registration reaches it at once;
5. a dev JWT and example curl commands on stdout;
6. with ``--watch``: file modification times are polled every second (no new dependency); a
   change re-registers the directory and calls ``POST /v1/poll``, and the new version rolls in
   without dropping a request (the pod's atomic swap);
7. Ctrl-C (or SIGTERM) stops the pod (in-flight requests finish, evidence is flushed), then the
   control plane, then the embedded Postgres.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp
import click
import jwt

from dap import embedded, server
from dap.resource_pod import errors, hosting, loading, settings
from dap.server import options

log = logging.getLogger(__name__)

DEV_SECRET = "dap-dev-secret--not-for-production--0123456789"
DEV_ADMIN_SECRET = "dap-dev-admin-secret"
DEV_ISSUER = "svc"
TOKEN_HOURS = 24
START_TIMEOUT = 60.0
WATCH_EVERY = 1.0
SKIPPED = (".", "__pycache__", "node_modules")


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


def signing_key(path: Path) -> Path:
    """The control plane's dev key file (32-byte seed as hex, mode 0600), created once."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(os.urandom(32).hex() + "\n")
    return path


def dev_token(workspace: str, secret: str = DEV_SECRET) -> str:
    now = int(time.time())
    claims = {
        "sub": "dev",
        "username": "dev",
        "roles": ["admin"],
        "workspace": workspace,
        "iss": DEV_ISSUER,
        "iat": now,
        "exp": now + TOKEN_HOURS * 3600,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def example_body(resource: Any) -> dict[str, Any] | None:
    """A create body for ``resource`` (every required field); ``None`` when one needs a reference."""
    samples: dict[str, Any] = {
        "integer": 1,
        "number": 1.5,
        "decimal": "1.50",
        "money": "10.00",
        "percent": "5",
        "boolean": True,
        "date": date.today().isoformat(),
        "datetime": f"{date.today().isoformat()}T12:00:00Z",
    }
    body: dict[str, Any] = {}
    for name, field in resource.fields.items():
        if not getattr(field, "required", False) or getattr(field, "read_only", False):
            continue
        kind = str(getattr(field, "type", "string"))
        choices = getattr(field, "options", None) or []
        if kind in ("relation", "child", "file", "json", "uuid"):
            return None
        body[name] = choices[0].value if choices else samples.get(kind, f"Example {name}")
    return body


def curl_examples(
    base: str, control_url: str, admin: str | None, catalog: server.Catalog, workspace: str
) -> str:
    auth = '-H "Authorization: Bearer $TOKEN"'
    lines = [f"  curl -s {base}/{workspace}/_ui/_meta/apps {auth}"]
    resources = sorted(catalog.resources.values(), key=lambda r: (example_body(r) is None, r.key))
    for resource in resources[:2]:
        url = f"{base}/{workspace}/api/{resource.module}/{resource.name}"
        body = example_body(resource)
        if "create" in resource.actions and body is not None:
            data = shlex.quote(json.dumps(body))
            lines.append(f"  curl -s -X POST {url} {auth} -H 'Content-Type: application/json' -d {data}")
        if "list" in resource.actions:
            lines.append(f"  curl -s '{url}?limit=5' {auth}")
    lines.append(f"  curl -s {base}/{workspace}/api/openapi.json")
    lines.append(f"  curl -s {base}/health")
    lines.append(f"  curl -s '{control_url}/v1/snapshot?workspace={workspace}'")
    if admin:
        lines.append(f"  curl -s {admin}/metrics | grep dap_http_requests_total")
    return "\n".join(lines)


class Control:
    """The control plane child process."""

    def __init__(self, config: DevConfig, dsn: str) -> None:
        self.config = config
        self.dsn = dsn
        self.url = f"http://127.0.0.1:{config.control_port}"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, session: aiohttp.ClientSession) -> None:
        key = signing_key(self.config.data_dir / "control-signing.key")
        command = [
            sys.executable,
            "-c",
            "import sys; from dap.cli import main; sys.exit(main())",
            "control",
            "serve",
            "--mode",
            "standalone",
            "--dev",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.config.control_port),
            "--db",
            self.dsn,
            "--signing-key",
            str(key),
            "--log-level",
            self.config.log_level,
        ]
        # a new session: Ctrl-C reaches only us, and we stop the control plane after the pod
        self.process = await asyncio.create_subprocess_exec(*command, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise errors.ConfigError(
                    f"the control plane exited with code {self.process.returncode} "
                    f"(is port {self.config.control_port} free? try --control-port)"
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=2)
                ) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise errors.ConfigError(
            f"the control plane did not answer {self.url}/health within {START_TIMEOUT:g}s"
        )

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()

    async def register(
        self, session: aiohttp.ClientSession, files: Mapping[str, bytes]
    ) -> dict[str, Any] | None:
        """Register ``files``; print the problems and return ``None`` when they are refused."""
        body = {
            "app": _app_name(self.config.spec_dir),
            "workspaces": [self.config.workspace],
            "files": [{"path": p, "content": base64.b64encode(c).decode("ascii")} for p, c in files.items()],
        }
        async with session.post(f"{self.url}/v1/artifacts", json=body) as response:
            answer: dict[str, Any] = await response.json(content_type=None)
            if response.status == 200:
                return answer
        say(f"registration refused ({response.status}): {answer.get('detail', answer)}")
        for item in answer.get("errors", []):
            where = (item.get("file") or "") + (f"#{item['document']}" if item.get("document") else "")
            say(f"  {where} {item.get('path', '')}: {item.get('message', '')}")
        return None

    async def poll(self, session: aiohttp.ClientSession) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.post(f"{self.url}/v1/poll", timeout=aiohttp.ClientTimeout(total=5)):
                pass


def _app_name(directory: Path) -> str:
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in directory.resolve().name.lower()).strip(
        "-_"
    )
    return name if name[:1].isalpha() else f"app-{name}" if name else "app"


async def _wait_serving(pod: hosting.Running, artifact_id: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        running = pod.pod.status.running
        if running is not None and running.artifact_id == artifact_id:
            return True
        await asyncio.sleep(0.05)
    return False


async def _watch(
    config: DevConfig, control: Control, pod: hosting.Running, session: aiohttp.ClientSession
) -> None:
    seen = fingerprint(config.spec_dir)
    while True:
        await asyncio.sleep(WATCH_EVERY)
        now = await asyncio.to_thread(fingerprint, config.spec_dir)
        if now == seen:
            continue
        await asyncio.sleep(0.3)  # let an editor finish writing
        seen = await asyncio.to_thread(fingerprint, config.spec_dir)
        say(f"change in {config.spec_dir}: registering")
        started = time.monotonic()
        answer = await control.register(session, await asyncio.to_thread(collect, config.spec_dir))
        if answer is None:
            continue
        if not answer.get("created", True):
            say("  (content unchanged)")
            continue
        await control.poll(session)
        if await _wait_serving(pod, answer["artifact_id"], config.pull_interval + 10):
            say(f"  now serving version {answer['version']} ({time.monotonic() - started:.2f}s)")
        else:
            say(f"  version {answer['version']} registered, not served yet: {pod.pod.status.message}")


async def run(config: DevConfig) -> int:
    """Run until Ctrl-C; return the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    handle = None
    if config.dsn:
        dsn = config.dsn
    else:
        say(f"starting the embedded Postgres in {config.data_dir / 'pg'} …")
        dsn, handle = await asyncio.to_thread(embedded.start, config.data_dir / "pg")
    control = Control(config, dsn)
    pod: hosting.Running | None = None
    watcher: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as session:
            say(f"starting the control plane on {control.url} …")
            await control.start(session)
            files = await asyncio.to_thread(collect, config.spec_dir)
            say(f"registering {config.spec_dir} ({len(files)} files) …")
            answer = await control.register(session, files)
            if answer is None and not config.watch:
                return 1
            opts = options.check(
                dsn=dsn,
                addr=config.addr,
                metrics_addr=config.admin_addr,
                jwt_secret=DEV_SECRET,
                jwt_issuer=DEV_ISSUER,
                cors_origins=[f"http://{config.addr}", "http://localhost:8080", "http://localhost:5173"],
                admin_secret=DEV_ADMIN_SECRET,
            )
            pod_config = settings.Settings(
                control_url=control.url,
                workspace=config.workspace,
                state_dir=config.data_dir / "pod",
                pull_interval=config.pull_interval,
                dev=True,
                fetch_keys=True,
                long_poll=True,
                pod_name="dap-dev",
                cluster_id="local",
            )
            pod = await hosting.start(opts, pod_config)
            if answer is not None and not await _wait_serving(
                pod, answer["artifact_id"], config.pull_interval + 10
            ):
                say(f"the pod did not load the artifact: {pod.pod.status.message}")
            _banner(config, control, pod)
            if config.watch:
                watcher = asyncio.create_task(_watch(config, control, pod, session))
            await stop.wait()
            say("stopping …")
            return 0
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if pod is not None:
            await pod.stop()
        await control.stop()
        if handle is not None:
            await asyncio.to_thread(handle.cleanup)


def _banner(config: DevConfig, control: Control, pod: hosting.Running) -> None:
    base = loading.local_url(pod.api_url)
    admin = pod.server.urls.get("admin")
    status = pod.pod.status.as_json()
    token = dev_token(config.workspace)
    catalog = loading.current(pod.server.app)
    say("")
    say(f"dap dev: serving workspace {config.workspace!r} at {base}/{config.workspace}/")
    say(f"  artifact {status['artifact_id']} version {status['version']} ({status['phase']})")
    say(f"  control plane {control.url} (standalone, dev); pod state in {config.data_dir / 'pod'}")
    if admin:
        say(f"  admin listener {admin} (bearer {DEV_ADMIN_SECRET} for /workspaces)")
    say("")
    say(f"dev JWT (HS256, secret {DEV_SECRET!r}, {TOKEN_HOURS} h):")
    say(f"  export TOKEN={token}")
    say("")
    say("try:")
    say(curl_examples(base, control.url, admin, catalog, config.workspace))
    say("")
    if config.watch:
        say(f"watching {config.spec_dir} for changes; Ctrl-C stops everything")
    else:
        say("Ctrl-C stops everything (add --watch to re-register on file changes)")
    sys.stdout.flush()
