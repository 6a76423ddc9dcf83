"""Boot options of ``dap serve`` and the rules that refuse a boot.

The options mirror the spec's "Process options: Server" table. ``check`` is pure: it receives
the raw values (as click parsed them) and either returns a validated :class:`ServeOptions` or
raises :class:`~dap.server.errors.BootRefused` with a one-line reason, so every refusal is tested
without starting anything. Reading the PEM file named by ``--jwt-public-key`` is the only I/O and
happens in the CLI before ``check`` is called.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from dap.server import errors

DEFAULT_ADDR = ":8080"
DEFAULT_METRICS_ADDR = "127.0.0.1:9102"
DEFAULT_ISSUER = "svc"
DEFAULT_MAX_BODY = 1024 * 1024
# a file field without storage.max_bytes takes at most this much (--max-file-bytes)
DEFAULT_MAX_FILE = 25 * 1024 * 1024
DEFAULT_POOL_SIZE = 10
DEFAULT_JOB_LEASE = "30s"
DEFAULT_CTX_LISTEN = "127.0.0.1:0"  # the bridge's /ctx listener for the app process
LOG_LEVELS = ("debug", "info", "warn", "error")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the address."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve anywhere
            return False

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ServeOptions:
    """Validated options of one server process."""

    spec: Path
    dsn: str
    addr: Address
    jwt_issuer: str
    cors_origins: tuple[str, ...]
    mode: str = "production"
    workspace: str | None = None
    jwt_secret: str | None = None
    jwt_public_key: str | None = None  # PEM text, not the file name
    tls_cert: Path | None = None
    tls_key: Path | None = None
    web_dir: Path | None = None
    sidecar_endpoint: str | None = None
    invoke_timeout: float = 30.0
    ctx_listen: str = DEFAULT_CTX_LISTEN
    runtime: str | None = None  # child-process mode: python, node or php (the bridge starts the app)
    app_dir: Path | None = None
    app_entrypoint: str | None = None
    metrics_addr: Address | None = field(default_factory=lambda: parse_address(DEFAULT_METRICS_ADDR))
    grpc_addr: Address | None = None  # the gRPC listener (``dap.server.rpc``); None: off
    admin_secret: str | None = None
    log_level: str = "info"
    log_debug: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_file_bytes: int = DEFAULT_MAX_FILE
    pool_size: int = DEFAULT_POOL_SIZE
    callback_allow: tuple[str, ...] = ()  # CIDRs a job callback may reach despite being internal
    callback_secret: str | None = None  # Standard Webhooks secret (whsec_...) signing callbacks
    job_lease: float = 30.0  # seconds a job worker holds a job between heartbeats
    metrics: bool = True  # False: /metrics answers 404 OBSERVABILITY_METRICS_DISABLED
    debug_surface: bool = False  # True: the admin listener's /debug/* (admin secret only)


def parse_address(value: str) -> Address:
    """``":8080"`` → ``0.0.0.0:8080``; ``"127.0.0.1:9102"``; ``"[::1]:80"``."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise errors.BootRefused(f"invalid address {value!r}: expected host:port or :port")
    host = host.strip("[]") or "0.0.0.0"
    return Address(host, int(port))


def parse_duration(value: str) -> float:
    """``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or bare seconds → seconds."""
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise errors.BootRefused(f"invalid duration {value!r}: expected e.g. 30s, 500ms, 2m")
    return float(match.group(1)) * _UNITS[match.group(2)]


MIN_JWT_SECRET_BYTES = 32


def check_dsn(dsn: str | None) -> str:
    """The DSN without surrounding blanks; ``BootRefused`` unless it is a postgresql:// one."""
    dsn = (dsn or "").strip()
    if not dsn:
        raise errors.BootRefused("no --dsn given: a postgresql:// DSN is required (or DAP_DSN)")
    scheme = dsn.partition(":")[0].lower()
    if scheme.startswith("sqlite"):
        raise errors.BootRefused("a sqlite DSN is refused: the production server runs on Postgres only")
    if scheme not in ("postgres", "postgresql"):
        raise errors.BootRefused(f"--dsn must be a postgresql:// DSN, got scheme {scheme!r}")
    return dsn


def check(
    *,
    mode: str = "production",
    spec: str | Path = "./spec",
    dsn: str | None,
    addr: str = DEFAULT_ADDR,
    workspace: str | None = None,
    jwt_secret: str | None = None,
    jwt_public_key: str | None = None,
    jwt_issuer: str = DEFAULT_ISSUER,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    cors_origins: tuple[str, ...] | list[str] = (),
    web_dir: str | Path | None = None,
    sidecar_endpoint: str | None = None,
    invoke_timeout: str = "30s",
    ctx_listen: str = DEFAULT_CTX_LISTEN,
    runtime: str | None = None,
    app_dir: str | Path | None = None,
    app_entrypoint: str | None = None,
    metrics_addr: str = DEFAULT_METRICS_ADDR,
    grpc_addr: str = "",
    admin_secret: str | None = None,
    log_level: str = "info",
    log_debug: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    max_file_bytes: int = DEFAULT_MAX_FILE,
    pool_size: int = DEFAULT_POOL_SIZE,
    callback_allow: tuple[str, ...] | list[str] = (),
    callback_secret: str | None = None,
    job_lease: str = DEFAULT_JOB_LEASE,
    metrics: bool = True,
    debug_surface: bool = False,
) -> ServeOptions:
    """Validate raw option values; raise ``BootRefused`` with a one-line reason on the first rule broken."""
    if mode != "production":
        raise errors.BootRefused(f"--mode {mode!r} is not implemented; only 'production' is", exit_code=2)
    dsn = check_dsn(dsn)
    secret = (jwt_secret or "").strip() or None
    public_key = (jwt_public_key or "").strip() or None
    if secret is None and public_key is None:
        raise errors.BootRefused("no JWT configuration: give --jwt-secret (HS256) or --jwt-public-key (PEM)")
    if secret is not None and public_key is not None:
        raise errors.BootRefused("give one of --jwt-secret and --jwt-public-key, not both")
    if secret is not None and len(secret.encode()) < MIN_JWT_SECRET_BYTES:
        raise errors.BootRefused(
            f"--jwt-secret is {len(secret.encode())} bytes; HS256 needs at least {MIN_JWT_SECRET_BYTES} "
            "(RFC 7518 3.2): generate one with `openssl rand -base64 48`"
        )
    if not jwt_issuer.strip():
        raise errors.BootRefused("--jwt-issuer must not be empty")
    origins = tuple(o.strip().rstrip("/") for o in cors_origins if o.strip())
    if not origins:
        raise errors.BootRefused("no --cors-origin given: a non-empty CORS allow-list is required")
    if "*" in origins:
        raise errors.BootRefused("--cors-origin '*' is refused: list the allowed origins")
    for origin in origins:
        if not re.fullmatch(r"https?://[^/\s]+", origin):
            raise errors.BootRefused(f"--cors-origin {origin!r} is not an origin (scheme://host[:port])")
    if (tls_cert is None) != (tls_key is None):
        raise errors.BootRefused("--tls-cert and --tls-key must be given together")
    if log_level not in LOG_LEVELS:
        raise errors.BootRefused(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    admin_addr = parse_address(metrics_addr) if metrics_addr.strip() else None
    admin = (admin_secret or "").strip() or None
    if admin_addr is not None and admin is not None and not admin_addr.loopback:
        raise errors.BootRefused(
            f"--metrics-addr {metrics_addr} is reachable from other hosts, and with --admin-secret it "
            "serves the workspace registry over plain HTTP: bind it to 127.0.0.1 (or drop --admin-secret "
            "to serve only /metrics and /health there)"
        )
    sidecar = (sidecar_endpoint or "").strip() or None
    if sidecar is not None and not re.fullmatch(r"unix:/+\S+|http://[^/\s]+/?", sidecar):
        raise errors.BootRefused(
            f"--sidecar-endpoint {sidecar!r} must be unix:///path/app.sock or http://127.0.0.1:PORT"
        )
    timeout = parse_duration(invoke_timeout)
    if not 0 < timeout <= 3600:
        raise errors.BootRefused("--invoke-timeout must be above 0 and at most 1h")
    ctx = ctx_listen.strip() or DEFAULT_CTX_LISTEN
    if not ctx.startswith("unix:") and not parse_address(ctx).loopback:
        raise errors.BootRefused(
            f"--ctx-listen {ctx} is reachable from other hosts: the app process's /ctx calls carry "
            "only their scope id, so bind it to 127.0.0.1 or a unix:///socket"
        )
    runtime = (runtime or "").strip() or None
    if runtime is not None:
        if runtime.partition(":")[0] not in ("python", "node", "php"):
            raise errors.BootRefused(
                f"--runtime {runtime!r}: expected python, node or php (optional :version)"
            )
        unix = ctx == DEFAULT_CTX_LISTEN or ctx.startswith("unix:")
        if (sidecar is not None and not sidecar.startswith("unix:")) or not unix:
            raise errors.BootRefused(
                "with --runtime the bridge starts the app itself: --sidecar-endpoint and --ctx-listen must "
                "be unix:// sockets (or left out: sockets under the state directory)"
            )
    if max_body_bytes < 1024:
        raise errors.BootRefused("--max-body-bytes must be at least 1024")
    if max_file_bytes < 1:
        raise errors.BootRefused("--max-file-bytes must be at least 1")
    if not 1 <= pool_size <= 1000:
        raise errors.BootRefused("--pool-size must be between 1 and 1000")
    allow = tuple(a.strip() for a in callback_allow if a.strip())
    for cidr in allow:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as exc:
            raise errors.BootRefused(f"--callback-allow {cidr!r} is not a CIDR (e.g. 10.0.0.0/8)") from exc
    hook_secret = (callback_secret or "").strip() or None
    if hook_secret is not None and not _webhook_secret(hook_secret):
        raise errors.BootRefused(
            "--callback-secret must be a Standard Webhooks secret: 'whsec_' and base64 of 24 to 64 "
            "random bytes (e.g. whsec_ and the output of `openssl rand -base64 32`)"
        )
    lease = parse_duration(job_lease)
    if not 1.0 <= lease <= 3600.0:
        raise errors.BootRefused("--job-lease must be between 1s and 1h")
    return ServeOptions(
        mode=mode,
        spec=Path(spec),
        dsn=dsn,
        addr=parse_address(addr),
        workspace=workspace or None,
        jwt_secret=secret,
        jwt_public_key=public_key,
        jwt_issuer=jwt_issuer.strip(),
        tls_cert=Path(tls_cert) if tls_cert is not None else None,
        tls_key=Path(tls_key) if tls_key is not None else None,
        cors_origins=origins,
        web_dir=Path(web_dir) if web_dir else None,
        sidecar_endpoint=sidecar,
        invoke_timeout=timeout,
        ctx_listen=ctx,
        runtime=runtime,
        app_dir=Path(app_dir) if app_dir else None,
        app_entrypoint=app_entrypoint or None,
        metrics_addr=admin_addr,
        grpc_addr=parse_address(grpc_addr) if grpc_addr.strip() else None,
        admin_secret=admin,
        log_level=log_level,
        log_debug=log_debug,
        max_body_bytes=max_body_bytes,
        max_file_bytes=max_file_bytes,
        pool_size=pool_size,
        callback_allow=allow,
        callback_secret=hook_secret,
        job_lease=lease,
        metrics=metrics,
        debug_surface=debug_surface,
    )


def _webhook_secret(value: str) -> bool:
    """Whether ``value`` is ``whsec_`` + base64 of 24 to 64 bytes."""
    if not value.startswith("whsec_"):
        return False
    try:
        raw = base64.b64decode(value[len("whsec_") :], validate=True)
    except (ValueError, binascii.Error):
        return False
    return 24 <= len(raw) <= 64
