"""dap.control — the control plane: artifacts, signing, snapshots, routing, evidence.

One package for the three serve modes of the control binary (spec: Control binary):

- region: registers artifacts (validate with dap.config, hash, sign, version, bind, route) and
  serves signed snapshots and envelopes to cluster controls;
- cluster: syncs snapshots and artifacts from its region into a local cache, serves them to the
  resource pods of its cluster, and relays their evidence to the region;
- standalone: region and cluster in one process for a single cluster or a laptop (``--dev``).

Layout: subpackages by concern, layered (import-linter, pyproject.toml), each reached through
its face (``__init__`` with ``__all__``), top to bottom::

    cli         thin click shells: ``dap control ...`` and ``dap register``
    serving     the HTTP app of ``dap control serve`` (region, cluster, standalone), cluster
                mode's sync and relay, the placements endpoint, the dev fleet
    artifacts   registration: pack, validate, hash, sign, store, bind
    kube        Kubernetes-native control: the region control and the cluster control
    supply      the supply-chain rules: transparency log, freezes, signing policies, promotions
    evidence    evidence records: models, validation, storage, the outbox
    clusters    the cluster registry, routing (spec rule 5), cluster mode's cache, live state
    storage     Postgres: schema and migrations, pool, artifacts, deployments
    trust       canonical JSON and signatures, envelopes, snapshots (pure)

Siblings on one floor (``artifacts | kube``; ``supply | evidence | clusters``) do not know each
other. Errors form one tree in ``errors``; typed identifiers are ``ids``. Resource pods talk to
this package over HTTP only.
"""

from dap.control.clusters.routing import ClusterInfo, Placement, choose
from dap.control.errors import ControlError
from dap.control.ids import AppName, ArtifactId, ClusterId, KeyId, WorkspaceId
from dap.control.serving.app import build_app, serve
from dap.control.serving.settings import Settings
from dap.control.trust.envelopes import Envelope
from dap.control.trust.signing import Signer, canonical_json, key_id, verify

__all__ = [
    "AppName",
    "ArtifactId",
    "ClusterId",
    "ClusterInfo",
    "ControlError",
    "Envelope",
    "KeyId",
    "Placement",
    "Settings",
    "Signer",
    "WorkspaceId",
    "build_app",
    "canonical_json",
    "choose",
    "key_id",
    "serve",
    "verify",
]
