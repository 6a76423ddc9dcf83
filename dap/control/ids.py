"""Typed identifiers of the control plane.

Plain strings on the wire and in Postgres; distinct types in the code so that a workspace id can
never be passed where a cluster id is expected without mypy noticing.
"""

from __future__ import annotations

from typing import NewType

ArtifactId = NewType("ArtifactId", str)
WorkspaceId = NewType("WorkspaceId", str)
ClusterId = NewType("ClusterId", str)
KeyId = NewType("KeyId", str)
AppName = NewType("AppName", str)
