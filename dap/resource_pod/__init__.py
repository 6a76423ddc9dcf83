"""dap.resource_pod — the generic resource pod: pull, verify, load, swap, report.

(public face completed below as the package grows)
"""
