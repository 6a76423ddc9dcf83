"""``dap/jobs/v1.proto``: the job a ``call: async`` action answers, and ``GetJob``'s request.

In a package of its own so that no entity or service name can clash with it; ``GetJob`` is REST's
``GET …/_jobs/{id}``. Pure.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from dap.server.rpc.shapes import FD, STRUCT, VALUE, add

JOBS_PACKAGE = "dap.jobs.v1"
JOBS_FILE = "dap/jobs/v1.proto"
JOB = f".{JOBS_PACKAGE}.Job"
GET_JOB = f".{JOBS_PACKAGE}.GetJobRequest"


def jobs_file() -> descriptor_pb2.FileDescriptorProto:
    """``dap/jobs/v1.proto``: the job of an async action, and the request of ``GetJob``."""
    f = descriptor_pb2.FileDescriptorProto(
        name=JOBS_FILE, package=JOBS_PACKAGE, syntax="proto3", dependency=[STRUCT]
    )
    job = f.message_type.add(name="Job")
    for number, (name, kind) in enumerate(JOB_FIELDS, start=1):
        if isinstance(kind, str):
            add(job, name, number, FD.TYPE_MESSAGE, kind)
        else:
            add(job, name, number, kind, optional=name in JOB_OPTIONAL)
    request = f.message_type.add(name="GetJobRequest")
    add(request, "id", 1, FD.TYPE_STRING)
    return f


# the fields of a job (``workflows.jobs.Job.view``, REST's ``{"data": job}``)
JOB_FIELDS: tuple[tuple[str, int | str], ...] = (
    ("id", FD.TYPE_STRING),
    ("state", FD.TYPE_STRING),  # queued, running, succeeded, failed
    ("progress", FD.TYPE_DOUBLE),
    ("action", FD.TYPE_STRING),
    ("target", FD.TYPE_STRING),
    ("record_id", FD.TYPE_STRING),
    ("created_at", FD.TYPE_STRING),
    ("started_at", FD.TYPE_STRING),
    ("finished_at", FD.TYPE_STRING),
    ("runs", FD.TYPE_INT64),
    ("result", VALUE),  # succeeded: what the synchronous call would have answered
    ("error", VALUE),  # failed: the problem document
    ("callback", VALUE),  # {state, attempts, error} when a callback was asked for
)
JOB_OPTIONAL = frozenset({"record_id", "started_at", "finished_at"})
