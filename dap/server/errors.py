"""The one error tree of ``dap.server`` and its RFC 9457 problem documents.

Every failure the server can name is a subclass of :class:`ServerError`. Library errors
(asyncpg, pyjwt, aiohttp) are translated at the boundary with ``raise X from exc`` so that the
rest of the package, and the HTTP layer in particular, only ever sees this tree::

    ServerError
     ├── BootRefused                 the process must not start (one line on stderr, exit code)
     ├── MigrationError              the schema cannot be brought to the manifests' shape
     │    └── DestructivePending     destructive steps wait for ``dap migrate`` (or are undeclared)
     └── ApiError                    answered to an HTTP client as a problem document
          ├── BadRequest             400  malformed JSON, query or path
          ├── Unauthorized           401  no or bad token
          ├── Forbidden              403
          ├── NotFound               404  unknown workspace, route or record
          ├── MethodNotAllowed       405  action not opted in by ``expose``
          ├── Conflict               409  lifecycle, unique value, first admin exists
          ├── PreconditionFailed     412  ``If-Match`` version mismatch
          ├── PayloadTooLarge        413
          ├── UriTooLong             414  a request line past the server's limit (``web.protocol``)
          ├── UnsupportedMediaType   415  a body that is not JSON on a JSON endpoint
          ├── ValidationFailed       422  one entry in ``errors`` per offending field
          ├── RateLimited            429  with Retry-After
          ├── HeaderFieldsTooLarge   431  a header field past the limit, or too many of them
          ├── NotImplementedHere     501  e.g. login without an HS256 secret
          ├── InternalError          500  carries a request id, never internals
          ├── ServiceUnavailable     503  Postgres unreachable; with Retry-After
          ├── GatewayTimeout         504  the app process gave no answer in the invoke timeout
          └── OtherHttpError         any other status aiohttp raised itself, kept as it was (and
                                     titled by it: ``http.HTTPStatus``'s phrase)

The problem document is fixed by ARCHITECTURE.md: ``type`` ``urn:dap:error:<code>``, ``title``,
``status``, ``detail``, ``code`` and ``errors`` (``[{path, message}]``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the boot path (options, migrations) raises these errors without the web stack
    from aiohttp import web

PROBLEM_CONTENT_TYPE = "application/problem+json"


@dataclass(frozen=True)
class FieldProblem:
    """One offending input: ``path`` is a field name or a query parameter."""

    path: str
    message: str


class ServerError(Exception):
    """Root of every error raised by ``dap.server``."""


class BootRefused(ServerError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    """The server must not start; ``str(self)`` is the one-line reason."""

    def __init__(self, reason: str, *, exit_code: int = 1) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


class MigrationError(ServerError):
    """The database schema cannot be brought to the manifests' shape."""


class DestructivePending(MigrationError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    """Destructive steps are pending: boot is refused until ``dap migrate`` applies them."""


class ApiError(ServerError):
    """An error answered to an HTTP client as an RFC 9457 problem document."""

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "SVC.SERVER.INTERNAL"
    title: ClassVar[str] = "Internal server error"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        errors: tuple[FieldProblem, ...] | list[FieldProblem] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.errors = tuple(errors)
        self.headers = dict(headers or {})

    def problem(self) -> dict[str, Any]:
        """The problem document of this error."""
        return {
            "type": f"urn:dap:error:{self.code}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            "errors": [{"path": e.path, "message": e.message} for e in self.errors],
        }


class BadRequest(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 400
    default_code = "SVC.REQUEST.MALFORMED"
    title = "Bad request"


class Unauthorized(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 401
    default_code = "SVC.AUTH.UNAUTHENTICATED"
    title = "Unauthorized"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail, code=code, headers={"WWW-Authenticate": 'Bearer realm="dap"'})


class Forbidden(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 403
    default_code = "SVC.AUTH.FORBIDDEN"
    title = "Forbidden"


class NotFound(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 404
    default_code = "SVC.NOT_FOUND"
    title = "Not found"


class MethodNotAllowed(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 405
    default_code = "SVC.REQUEST.METHOD_NOT_ALLOWED"
    title = "Method not allowed"

    def __init__(self, detail: str, *, allow: Sequence[str], code: str | None = None) -> None:
        # RFC 9110 15.5.6: a 405 carries Allow, empty when no method is open on the resource
        super().__init__(detail, code=code, headers={"Allow": ", ".join(allow)})


class Conflict(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 409
    default_code = "SVC.CONFLICT"
    title = "Conflict"


class PreconditionFailed(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 412
    default_code = "SVC.VERSION.MISMATCH"
    title = "Precondition failed"


class PayloadTooLarge(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 413
    default_code = "SVC.REQUEST.TOO_LARGE"
    title = "Payload too large"


class UriTooLong(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 414
    default_code = "SVC.REQUEST.URI_TOO_LONG"
    title = "URI too long"


class UnsupportedMediaType(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 415
    default_code = "SVC.REQUEST.UNSUPPORTED_MEDIA_TYPE"
    title = "Unsupported media type"


class ValidationFailed(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 422
    default_code = "SVC.VALIDATE.INVALID"
    title = "Validation failed"


class RateLimited(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 429
    default_code = "SVC.RATE.LIMITED"
    title = "Too many requests"


class HeaderFieldsTooLarge(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 431
    default_code = "SVC.REQUEST.HEADERS_TOO_LARGE"
    title = "Request header fields too large"


class NotImplementedHere(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 501
    default_code = "SVC.SERVER.NOT_IMPLEMENTED"
    title = "Not implemented"


class InternalError(ApiError):
    status = 500
    default_code = "SVC.SERVER.INTERNAL"
    title = "Internal server error"


class ServiceUnavailable(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 503
    default_code = "SVC.SERVER.UNAVAILABLE"
    title = "Service unavailable"

    def __init__(self, detail: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(detail, code=code, headers={"Retry-After": str(retry_after)})


class GatewayTimeout(ApiError):  # noqa: N818 -- named for the HTTP status, as aiohttp's are
    status = 504
    default_code = "SVC.SIDECAR.TIMEOUT"
    title = "Gateway timeout"


class OtherHttpError(ApiError):
    """One of aiohttp's own HTTP errors that has no class here, with its status kept."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail, code=f"SVC.REQUEST.HTTP_{status}", headers=headers)
        self.http_status = status

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "status": self.http_status, "title": title_of(self.http_status)}


def title_of(status: int) -> str:
    """The standard reason phrase of ``status`` (RFC 9110), ``HTTP <status>`` for an unknown one."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def problem_response(error: ApiError, *, request_id: str | None = None) -> web.Response:
    """An ``application/problem+json`` response for ``error``."""
    from aiohttp import web

    body = error.problem()
    status = body["status"]
    if request_id is not None:
        body["request_id"] = request_id
    headers = dict(error.headers)
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        PreconditionFailed,
        PayloadTooLarge,
        UriTooLong,
        UnsupportedMediaType,
        ValidationFailed,
        RateLimited,
        HeaderFieldsTooLarge,
        NotImplementedHere,
        InternalError,
        ServiceUnavailable,
    )
}
# the headers of aiohttp's errors that say how to go on (Allow of a 405, Retry-After of a 503)
_KEPT_HEADERS = ("Allow", "Retry-After")


def from_http_exception(exc: web.HTTPException) -> ApiError:
    """Translate one of aiohttp's own HTTP errors (413 from ``client_max_size``, 404 and 405 of the
    router), keeping its status and the headers that tell the client what to do."""
    kept = {k: exc.headers[k] for k in _KEPT_HEADERS if k in exc.headers}
    cls = _BY_STATUS.get(exc.status)
    if cls is None or cls is ServiceUnavailable:
        return OtherHttpError(exc.status, exc.reason, headers=kept)
    if cls is Unauthorized:
        return Unauthorized(exc.reason)
    if cls is MethodNotAllowed:
        return MethodNotAllowed(
            exc.reason, allow=kept.get("Allow", "").split(", ") if kept.get("Allow") else []
        )
    return cls(exc.reason, headers=kept)
