"""The package's errors as gRPC statuses: a code, the detail, and a ``google.rpc.Status`` detail.

The status carries (in ``grpc-status-details-bin``) a ``google.rpc.ErrorInfo`` whose ``reason`` is
the ``SVC.*`` code REST's problem document has (``domain`` ``dap``, ``metadata.http_status`` the
status REST answers), and for validation errors a ``google.rpc.BadRequest`` listing each field's
problem, so a client tells errors apart by the same codes on either protocol.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from dap.server import errors

DOMAIN = "dap"

# HTTP status -> gRPC code (the mapping of google.rpc.Code's documentation, 409 as ABORTED:
# a version or lifecycle conflict the caller may retry after reading again)
_CODES: dict[int, int] = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    409: code_pb2.ABORTED,
    412: code_pb2.FAILED_PRECONDITION,
    413: code_pb2.RESOURCE_EXHAUSTED,
    414: code_pb2.INVALID_ARGUMENT,
    415: code_pb2.INVALID_ARGUMENT,
    422: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    431: code_pb2.INVALID_ARGUMENT,
    501: code_pb2.UNIMPLEMENTED,
    503: code_pb2.UNAVAILABLE,
    504: code_pb2.DEADLINE_EXCEEDED,
}


def code_of(http_status: int) -> int:
    return int(_CODES.get(http_status, code_pb2.INTERNAL))


def of(exc: errors.ApiError) -> grpc.Status:
    """The status answering ``exc``."""
    info = error_details_pb2.ErrorInfo(
        reason=exc.code, domain=DOMAIN, metadata={"http_status": str(exc.status)}
    )
    details = [_pack(info)]
    if exc.errors:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=e.path, description=e.message)
                for e in exc.errors
            ]
        )
        details.append(_pack(bad))
    status = status_pb2.Status(code=code_of(exc.status), message=exc.detail, details=details)
    converted: grpc.Status = rpc_status.to_status(status)
    return converted


def _pack(detail: error_details_pb2.ErrorInfo | error_details_pb2.BadRequest) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def reason(trailing: object) -> str | None:
    """The ``SVC.*`` code in a failed call's trailing metadata (a client's view), ``None`` without
    a dap detail. ``trailing`` is the call's ``trailing_metadata()`` (pairs, sync or aio)."""
    for key, value in trailing or ():  # type: ignore[attr-defined]
        if key != rpc_status.GRPC_DETAILS_METADATA_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
                return str(info.reason)
    return None
