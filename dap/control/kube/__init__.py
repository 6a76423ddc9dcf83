"""dap.control.kube — Kubernetes-native control: the region control and the cluster control.

- ``region``: on the management cluster, watches Workspace and Cluster resources (kopf), routes
  the Workspaces by spec rule 5 into the deployments table, and writes their status back.
- ``member``: in each workload cluster, pulls its placements from the region over HTTP
  (``GET /v1/placements``, served by ``dap.control.serving.placements``), keeps them as Workspace
  resources the operator reconciles, deletes the ones that moved away, and reports their status
  to the region.
- ``placing`` (pure), ``bindings`` (Postgres) and ``leases`` (leader election) are their parts;
  the Kubernetes transport and login are ``dap.kube``, shared with the operator.

It builds on ``clusters`` (the registry) and ``storage``; the HTTP app (``serving``) and the
command line (``cli.controls``) sit above it. Its modules are its face.
"""

__all__ = ["bindings", "leases", "member", "placing", "region"]
