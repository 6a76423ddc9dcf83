"""dap.config — the manifest model, its loader, its JSON Schema and its validation rules.

Public face::

    spec = config.load_spec(Path("examples/procurement"))   # or config.load_files({path: bytes})
    spec.entities["buying/purchase_order"].spec.fields
    config.manifest_schema()                                # JSON Schema draft-07 of every kind

``stage_files`` builds the same spec with the JSON Schema pass left to ``StagedSpec.confirm()``,
for a boot that runs that pass while Postgres creates the tables. The loaders raise
``SpecError`` whose ``problems`` list every ``Problem`` (file, document, JSON path, message).
This package depends on nothing else of dap.

Inside, modules are split by what they do, each under 500 lines, behind the faces other packages
import: ``expressions`` is a package of the expression language whose ``__init__`` is its one face
(``trees``: limits, errors, syntax tree; ``parsing``: tokenizer, parser, renderer; ``values``:
types, truth, operators; ``evaluating``: tree walk and functions), and
``validation`` is a package of cross-document rules whose ``check`` runs them all (``locating``,
``naming``, ``fields``, ``behaviour``, ``scoping``, ``references``, ``formulas``).
"""

from dap.config import durations, enums, names
from dap.config.actions import Action
from dap.config.entities import EntitySpec, ExposeConfig
from dap.config.errors import Problem, SpecError
from dap.config.fields import Field, FieldOption
from dap.config.loading import StagedSpec, load_files, load_spec, read_files, stage_files
from dap.config.manifests import (
    KINDS,
    AppManifest,
    EntityManifest,
    FormManifest,
    Manifest,
    ModuleManifest,
    PageManifest,
    ServiceManifest,
    TableManifest,
    WorkspaceManifest,
)
from dap.config.schema import manifest_schema
from dap.config.specs import Origin, Spec

__all__ = [
    "KINDS",
    "Action",
    "AppManifest",
    "EntityManifest",
    "EntitySpec",
    "ExposeConfig",
    "Field",
    "FieldOption",
    "FormManifest",
    "Manifest",
    "ModuleManifest",
    "Origin",
    "PageManifest",
    "Problem",
    "ServiceManifest",
    "Spec",
    "SpecError",
    "StagedSpec",
    "TableManifest",
    "WorkspaceManifest",
    "durations",
    "enums",
    "load_files",
    "load_spec",
    "manifest_schema",
    "names",
    "read_files",
    "stage_files",
]
