"""dap.control — the control plane: artifacts, signing, snapshots, routing, evidence.

One package for the three serve modes of the control binary (spec: Control binary):

- region: registers artifacts (validate with dap.config, hash, sign, version, bind, route) and
  serves signed snapshots and envelopes to cluster controls;
- cluster: syncs snapshots and artifacts from its region into a local cache, serves them to the
  resource pods of its cluster, and relays their evidence to the region;
- standalone: region and cluster in one process for a single cluster or a laptop (``--dev``).

Layout: pure logic (``signing``, ``envelopes``, ``routing``, ``snapshots``,
``evidence``) under thin I/O shells (``store``, ``registry``, ``evidence_store``,
``cluster_store``, ``handlers``, ``reports``, ``cluster``, ``app``, ``cli``). Errors form one tree
in ``errors``. Resource pods talk to this package over HTTP only.
"""

from dap.control.app import build_app, serve
from dap.control.envelopes import Envelope
from dap.control.errors import ControlError
from dap.control.ids import AppName, ArtifactId, ClusterId, KeyId, WorkspaceId
from dap.control.routing import ClusterInfo, Placement, choose
from dap.control.settings import Settings
from dap.control.signing import Signer, canonical_json, key_id, verify

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
