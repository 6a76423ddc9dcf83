"""dap — the Declarative Application Platform.

Typed YAML manifests become running multi-tenant backends on Kubernetes. The import package
is layered (see ARCHITECTURE.md and the import-linter contracts in pyproject.toml):

    config  <-  server, control  <-  resource_pod        operator -> config (shared names only)
"""

__version__ = "0.1.0"
