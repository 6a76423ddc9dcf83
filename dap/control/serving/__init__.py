"""dap.control.serving — ``dap control serve``: the HTTP app of the region, cluster and standalone modes.

The layer that ties the concerns below into a process: routes and handlers, the problem
documents, the cluster mode's sync and relay loops, the placements endpoint of the
Kubernetes-native controls, and the dev fleet that runs a region beside them. Only the command
line sits above it. Its modules are its face::

    settings     the settings of one control process
    http         typed app keys, problem documents, JSON helpers shared by the handlers
    traced       a server span per request when tracing is on (registrations, snapshot pulls)
    handlers     artifacts, keys, snapshots, poll and health
    reports      evidence in and out, operator reports, cluster announcements
    proofs       ``GET /v1/log/...``: signed heads, entries and proofs of the transparency log
    placements   ``GET /v1/placements``: what a cluster control pulls from its region
    syncing      cluster mode: sync from the region, relay evidence to it
    app          the aiohttp application, its routes per mode and its life cycle
    fleets       ``dap control dev-fleet``: one region and several clusters on one machine
"""

__all__ = [
    "app",
    "fleets",
    "handlers",
    "http",
    "placements",
    "proofs",
    "reports",
    "settings",
    "syncing",
    "traced",
]
