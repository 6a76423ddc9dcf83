"""dap.control.artifacts — registration of artifacts: pack, validate, hash, sign, store, bind.

The author side (``packing``) and the control's side (``registration``, with ``validation``
through ``dap.config``) of ``dap register`` / ``POST /v1/artifacts``. It uses the supply-chain
rules (policies, the log) and the cluster registry; HTTP and the command line sit above it. Its
modules are its face::

    packing        collect a directory's files, honouring ``.dapignore``
    validation     manifest validation of an uploaded artifact
    registration   validate, hash, sign, store, bind: the rule of the spec
"""

__all__ = ["packing", "registration", "validation"]
