"""Manifest validation of an uploaded artifact, through dap.config.

Registration accepts any files (scripts, app code, assets); only ``.yaml``/``.yml`` files are
manifests. dap.config validates them (schema, kinds, cross-references) and this module turns its
``SpecError`` problems into the control plane's 422 error items, and its Workspace manifests into
routing placements (the bindings an artifact brings with it).
"""

from __future__ import annotations

from collections.abc import Mapping

from dap import config
from dap.config import errors as config_errors
from dap.control import errors
from dap.control.clusters import routing
from dap.control.ids import ClusterId, WorkspaceId


def validate(files: Mapping[str, bytes]) -> list[routing.Placement]:
    """Validate the manifests among ``files``; return the placements of their Workspaces."""
    if not any(path.endswith((".yaml", ".yml")) for path in files):
        raise errors.ArtifactInvalidError(
            "the artifact holds no manifest (.yaml or .yml file)",
            [errors.ErrorItem("files", "at least one manifest is required")],
        )
    try:
        spec = config.load_files(dict(files))
    except config_errors.SpecError as exc:
        items = [
            errors.ErrorItem(path=p.path, message=p.message, file=p.file, document=p.document)
            for p in exc.problems
        ]
        raise errors.ArtifactInvalidError(f"{len(items)} problem(s) in the manifests", items) from exc
    placements = []
    for name, workspace in sorted(spec.workspaces.items()):
        ws = workspace.spec
        placements.append(
            routing.Placement(
                workspace_id=WorkspaceId(name),
                cluster_class=ws.cluster_class,
                region=ws.region,
                cluster=ClusterId(ws.cluster) if ws.cluster else None,
            )
        )
    return placements
