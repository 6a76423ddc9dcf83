"""``dap dev --fleet``: the fleet on one machine, by handing the process to ``dap control dev-fleet``.

One region and several "clusters" (namespaces of one API server): workspaces applied to the
management namespace are routed, land in a cluster's namespace and move when a cluster fills up.
That needs a Kubernetes API server with dap's CRDs installed; this module finds its kubeconfig
(``--kubeconfig``, else the first file of ``$KUBECONFIG``), says clearly when there is none, and
replaces this process with ``dap control dev-fleet`` (``exec``, not a child: dev mode drives the
control plane as a process, and Ctrl-C then reaches the fleet directly, which stops everything it
started, its embedded Postgres and its dev-mode operators included: ``dev-fleet`` runs one
``dap operator --dev-auto-grant-claims`` per cluster namespace, so claims on local Datastores
are auto-granted there, as the spec's development mode grants at once what production makes wait).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from dap.resource_pod import errors

PREFIX = "dev"
NO_API_SERVER = (
    "dap dev --fleet needs a Kubernetes API server with dap's CRDs installed: pass --kubeconfig "
    "FILE or set $KUBECONFIG (e.g. `kind create cluster && kubectl apply -k kustomize/overlays/kind`; "
    "see docs/control.md, 'On one machine')"
)


def kubeconfig(given: Path | None, environ: Mapping[str, str]) -> Path:
    """The kubeconfig to use: the one given, else the first existing file of ``$KUBECONFIG``."""
    candidates = [given] if given else [Path(p) for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    for path in candidates:
        if path.is_file():
            return path
    if given:
        raise errors.ConfigError(f"--kubeconfig {given}: no such file. {NO_API_SERVER}")
    raise errors.ConfigError(NO_API_SERVER)


def command(config: Path, clusters: str, *, port: int, data_dir: Path, log_level: str) -> list[str]:
    """The argv of ``dap control dev-fleet`` run by this very interpreter."""
    return [
        sys.executable,
        "-c",
        "import sys; from dap.cli import main; sys.exit(main())",
        *("control", "dev-fleet", "--kubeconfig", str(config), "--clusters", clusters),
        *("--prefix", PREFIX, "--port", str(port)),
        *("--data-dir", str(data_dir / "fleet-pg"), "--log-level", log_level),
    ]


def run(argv: list[str]) -> None:  # pragma: no cover - replaces the process
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
