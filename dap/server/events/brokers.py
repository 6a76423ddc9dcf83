"""Where ``pubsub`` publishes: the NATS server of the process (pure but for :func:`read_declared`).

In order:

1. ``DAP_NATS_URL`` (an override, for development and for hosts that set it);
2. the ``Datastore`` manifest of driver ``nats`` in the spec directory (the first by name when
   several are declared): its URL from the environment under the names the operator injects for a
   Ready ResourceClaim and the bridge reads (``DAP_DATASTORE_<NAME>_URL``, else ``…_HOST``,
   ``…_PORT``, ``…_USERNAME``, ``…_PASSWORD``), else the manifest's ``connection.host`` and
   ``port`` (default 4222);
3. none: pubsub goes to Postgres ``NOTIFY``.

A declared nats datastore that gives no host either way is a boot error (a declared broker that
events silently skip would lose every message to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dap.config import read_files
from dap.config.enums import DatastoreDriver
from dap.config.manifests import DatastoreManifest
from dap.config.platform import DatastoreSpec
from dap.server import errors

OVERRIDE = "DAP_NATS_URL"
PREFIX = "DAP_DATASTORE_"
PORT = 4222


def env_key(text: str) -> str:
    """The operator's and the bridge's ``env_key`` (env-safe, upper case): the names must agree."""
    key = "".join(c if c.isalnum() or c == "_" else "_" for c in text).upper()
    return f"_{key}" if key[:1].isdigit() else key


def credentials(name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The injected variables of datastore ``name``, keyed without the prefix (``URL``, ``HOST``…)."""
    prefix = f"{PREFIX}{env_key(name)}_"
    return {k[len(prefix) :]: v for k, v in environ.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class Broker:
    """A NATS server to publish to; ``user``/``password`` go to the client apart from the URL
    (the client does not percent-decode a URL's user info)."""

    url: str
    user: str | None = None
    password: str | None = None


def datastore(name: str, spec: DatastoreSpec, environ: Mapping[str, str]) -> Broker:
    """The broker of declared datastore ``name``: injected ``URL``, else host and port (injected,
    else declared); with the injected ``USERNAME`` and ``PASSWORD`` either way."""
    creds = credentials(name, environ)
    user, password = creds.get("USERNAME") or None, creds.get("PASSWORD") or None
    if creds.get("URL"):
        return Broker(creds["URL"], user, password)
    conn = spec.connection
    host = creds.get("HOST") or (conn.host if conn else None)
    if not host:
        raise errors.BootRefused(
            f"datastore {name!r} (driver nats) has no host: declare connection.host or set "
            f"{PREFIX}{env_key(name)}_URL (the operator injects it for a Ready ResourceClaim)"
        )
    port = creds.get("PORT") or (str(conn.port) if conn and conn.port else str(PORT))
    return Broker(f"nats://{host}:{port}", user, password)


def broker(declared: Mapping[str, DatastoreSpec], environ: Mapping[str, str]) -> Broker | None:
    """Where pubsub publishes, or ``None`` for Postgres NOTIFY (see the module's order)."""
    if environ.get(OVERRIDE):
        return Broker(environ[OVERRIDE])
    names = sorted(n for n, s in declared.items() if s.driver is DatastoreDriver.NATS)
    return datastore(names[0], declared[names[0]], environ) if names else None


def declared(files: Mapping[str, bytes]) -> dict[str, DatastoreSpec]:
    """The ``Datastore`` manifests among ``files`` (already validated when the spec loaded; other
    kinds are skipped unread)."""
    out: dict[str, DatastoreSpec] = {}
    for text in files.values():
        if b"Datastore" not in text:
            continue
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "Datastore":
                manifest = DatastoreManifest.model_validate(doc)
                out[manifest.metadata.name] = manifest.spec
    return out


def read_declared(spec_dir: Path) -> dict[str, DatastoreSpec]:
    """:func:`declared` of the manifests below ``spec_dir`` (none when it is not a directory)."""
    return declared(read_files(spec_dir)) if spec_dir.is_dir() else {}
