"""dap.server.rpc — gRPC exposure of the entities whose ``expose`` has ``grpc``: a sibling of ``web``.

An adapter, as REST is (ARCHITECTURE.md, "Protocols are adapters"): the verbs are those of
``workflows.operations``; this package only builds the schema, decodes, calls and encodes::

    shapes       the schema's building blocks: one field, well-known types, ``.proto`` text (pure)
    descriptors  the catalog's gRPC schema as descriptors: its entities and services (pure)
    jobs_schema  ``dap/jobs/v1.proto``: the job of an async action (pure)
    sagas_schema ``dap/sagas/v1.proto``: the operators' saga service (pure)
    codec        record messages to and from the JSON values of the operations
    status       the package's errors as gRPC statuses with a google.rpc.Status detail
    services     the handlers of each entity's service
    sagas        the handlers of the saga service: the inbox, a saga, a person's decisions
    server       the listener of ``dap serve --grpc-addr``, with server reflection

Imported only when ``--grpc-addr`` is given (``dap.server.cli``) or the schema is printed.
"""

__all__ = [
    "codec",
    "descriptors",
    "jobs_schema",
    "sagas",
    "sagas_schema",
    "server",
    "services",
    "shapes",
    "status",
]
