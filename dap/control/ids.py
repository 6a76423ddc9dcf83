"""Typed identifiers of the control plane.

Plain strings on the wire and in Postgres; distinct types in the code so that a workspace id can
never be passed where a cluster id is expected without mypy noticing.
"""

from __future__ import annotations

import re
from typing import NewType

ArtifactId = NewType("ArtifactId", str)
WorkspaceId = NewType("WorkspaceId", str)
ClusterId = NewType("ClusterId", str)
KeyId = NewType("KeyId", str)
AppName = NewType("AppName", str)

# A workspace id is a DNS label: it names Kubernetes objects, schemas and hostnames.
WORKSPACE_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def is_workspace_id(raw: str) -> bool:
    return WORKSPACE_ID.fullmatch(raw) is not None
