"""dap.control.clusters — clusters as the control sees them: registry, routing, caches, live state.

The region's registry of clusters and spec rule 5 (which cluster a workspace runs on), the cache
a cluster control keeps of its region, and the in-memory state that answers snapshot polls. It
builds on ``trust`` and ``storage`` and knows neither evidence nor the supply-chain rules. Its
modules are its face::

    routing    workspace-to-cluster routing, a pure chooser
    registry   the cluster registry and placing bindings on clusters (the I/O around ``routing``)
    caches     cluster mode's Postgres cache: trusted region keys, region snapshot, artifacts
    live       the in-memory state that answers snapshot polls without the database
"""

__all__ = ["caches", "live", "registry", "routing"]
