"""The Kubernetes-shaped envelope shared by every manifest kind.

    apiVersion: dap.io/v1
    kind: Entity
    metadata: {name: purchase_order, module: buying, labels: {...}}
    spec: {...}

``KINDS`` maps each kind name to its model. Module-scoped kinds are addressed ``module/name``;
module-less kinds (Module, Workspace, Environment, Datastore, Config, Role) by name alone.
"""

from __future__ import annotations

from typing import Literal

import pydantic

from dap.config import apps, entities, platform, roles
from dap.config.base import Record
from dap.config.names import MANIFEST_API_VERSION


class Metadata(Record):
    name: str = pydantic.Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=63)
    module: str | None = pydantic.Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)


class Manifest(Record):
    api_version: Literal["dap.io/v1"] = pydantic.Field(alias="apiVersion")
    kind: str
    metadata: Metadata

    @property
    def key(self) -> str:
        """``module/name`` for module-scoped kinds, ``name`` otherwise."""
        module = self.metadata.module
        return f"{module}/{self.metadata.name}" if module else self.metadata.name


class ModuleManifest(Manifest):
    kind: Literal["Module"]
    spec: platform.ModuleSpec = platform.ModuleSpec()


class EntityManifest(Manifest):
    kind: Literal["Entity"]
    spec: entities.EntitySpec


class ServiceManifest(Manifest):
    kind: Literal["Service"]
    spec: platform.ServiceSpec


class AppManifest(Manifest):
    kind: Literal["App"]
    spec: apps.AppSpec


class PageManifest(Manifest):
    kind: Literal["Page"]
    spec: apps.PageSpec


class FormManifest(Manifest):
    kind: Literal["Form"]
    spec: apps.FormSpec


class TableManifest(Manifest):
    kind: Literal["Table"]
    spec: apps.TableSpec


class KanbanManifest(Manifest):
    kind: Literal["Kanban"]
    spec: apps.KanbanSpec


class ListingManifest(Manifest):
    kind: Literal["Listing"]
    spec: apps.ListingSpec


class ApprovalInboxManifest(Manifest):
    kind: Literal["ApprovalInbox"]
    spec: apps.ApprovalInboxSpec


class DashboardManifest(Manifest):
    kind: Literal["Dashboard"]
    spec: apps.DashboardSpec


class WorkspaceManifest(Manifest):
    kind: Literal["Workspace"]
    spec: platform.WorkspaceSpec = platform.WorkspaceSpec()


class EnvironmentManifest(Manifest):
    kind: Literal["Environment"]
    spec: platform.EnvironmentSpec = platform.EnvironmentSpec()


class DatastoreManifest(Manifest):
    kind: Literal["Datastore"]
    spec: platform.DatastoreSpec


class ConfigManifest(Manifest):
    kind: Literal["Config"]
    spec: platform.ConfigSpec = platform.ConfigSpec()


class RoleManifest(Manifest):
    kind: Literal["Role"]
    spec: roles.RoleSpec = roles.RoleSpec()


KINDS: dict[str, type[Manifest]] = {
    "Module": ModuleManifest,
    "Entity": EntityManifest,
    "Service": ServiceManifest,
    "App": AppManifest,
    "Page": PageManifest,
    "Form": FormManifest,
    "Table": TableManifest,
    "Kanban": KanbanManifest,
    "Listing": ListingManifest,
    "ApprovalInbox": ApprovalInboxManifest,
    "Dashboard": DashboardManifest,
    "Workspace": WorkspaceManifest,
    "Environment": EnvironmentManifest,
    "Datastore": DatastoreManifest,
    "Config": ConfigManifest,
    "Role": RoleManifest,
}
MODULE_SCOPED = frozenset(
    {"Entity", "Service", "App", "Page", "Form", "Table", "Kanban", "Listing", "ApprovalInbox", "Dashboard"}
)
assert MANIFEST_API_VERSION == "dap.io/v1"  # keep the Literal above in step with the shared name
