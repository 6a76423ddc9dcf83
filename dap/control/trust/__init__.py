"""dap.control.trust — what a pod trusts: signatures, artifact envelopes, signed snapshots (pure).

The floor every other concern of the control plane signs or verifies with; it does no I/O and
imports nothing of the control but ``errors`` and ``ids``. Its modules are its face (``from
dap.control.trust import signing``)::

    signing     canonical JSON, ed25519 signing and verification, key ids and key files
    envelopes   artifact envelopes: building, decoding and full verification
    snapshots   the signed desired state a cluster or resource pod pulls
"""

__all__ = ["envelopes", "signing", "snapshots"]
